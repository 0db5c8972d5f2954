#!/usr/bin/env python3
"""Generate the differential parser corpus: mutated programs and the reference's verdict on each.

Usage: tools/make-parser-corpus.py [--count N] [--seed S] [--out DIR] [--compare]

Takes the real programs of the project (tests/conformance/**/*.cf and
tests/fixtures/parser/ok/*.cf), applies one to three token-level mutations to randomly chosen
ones (delete, insert a snippet, duplicate, swap), and writes N distinct results as
DIR/mNNN.cf (default DIR: tests/fixtures/parser/differential). It then asks the reference parser
about each one (tools/parser-oracle.py, which needs the reference's Python environment) and
writes DIR/expected.tsv:

    file<TAB>OK
    file<TAB>ERR <line> <kind>

The same seed and the same input programs give the same corpus. DIR/known-divergences.tsv is
kept as it is: it is written by hand (see tests/tests/parser_differential.rs). With --compare,
the script finally runs weft on the new corpus (cargo run --example parser_outcome) and prints
every file where weft and the reference disagree, which is the list to review when updating
known-divergences.tsv.
"""

import argparse
import os
import random
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One token (or run of trivia) per match, so that concatenating the matches gives the program
# back: multi-line strings, one-line strings with their prefix, names, numbers, two-character
# operators, comments, newlines, blanks, and any other single character.
TOKEN = re.compile(
    r'"""[\s\S]*?"""|[rf]?"(?:[^"\\\n]|\\.)*"|[rf]?\'(?:[^\'\\\n]|\\.)*\'|[A-Za-z_][A-Za-z0-9_-]*'
    r"|-?\d*\.\d+|-?\d+|::|--|->|<-|==|!=|<=|>=|\+=|\*\*|#[^\n]*|\n|[ \t]+|."
)

# Inserted by mutations: keywords, operators and literals that often break a program in an
# interesting place.
SNIPPETS = [
    " not ", " in ", " and ", " or ", "?", ":", " = ", "+=", "(", ")", "[", "]", "{", "}", ",", ".",
    " -1", " - ", "**", " is defined", " for ", " if ", " else ", " elif ", " end ", "\n", " A ", " a ",
    "::", '"s"', '"""m"""', " entity ", " implement ", " typedef ", " index ", " import ", " using ",
    " when ", " parents ", " matching /x/ ", " true ", " null ", " dict ", "[0:]", " -- ", " undef ",
    " false ", " defined ", '"{{x}}"', 'f"{x}"', 'r"x"', " A.b [1] -- B ", " x = ", "\n    ",
]

# Programs longer than this many tokens contribute a window of it, so that mutations land in
# every part of a long program and the corpus stays small.
WINDOW = 300


def sources():
    paths = []
    for base in ("tests/conformance", "tests/fixtures/parser/ok"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, base)):
            paths.extend(os.path.join(dirpath, n) for n in names if n.endswith(".cf"))
    paths.sort()
    texts = []
    for path in paths:
        with open(path, encoding="utf-8", newline="") as f:
            texts.append(f.read())
    return texts


def mutate(rng, text):
    tokens = TOKEN.findall(text)
    if len(tokens) > WINDOW + 100:
        start = rng.randrange(len(tokens) - WINDOW)
        tokens = tokens[start : start + WINDOW]
    for _ in range(rng.randint(1, 3)):
        if not tokens:
            break
        i = rng.randrange(len(tokens))
        op = rng.random()
        if op < 0.3:
            del tokens[i]
        elif op < 0.6:
            tokens.insert(i, rng.choice(SNIPPETS))
        elif op < 0.8:
            tokens.insert(i, tokens[rng.randrange(len(tokens))])
        else:
            j = rng.randrange(len(tokens))
            tokens[i], tokens[j] = tokens[j], tokens[i]
    return "".join(tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/parser/differential"))
    parser.add_argument("--compare", action="store_true", help="also run weft and list disagreements")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    texts = sources()
    if not texts:
        sys.exit("make-parser-corpus: no input programs found")
    originals = set(texts)
    seen = set()
    programs = []
    while len(programs) < args.count:
        program = mutate(rng, rng.choice(texts))
        # An unchanged program or a repeat adds nothing.
        if program in originals or program in seen or not program.strip():
            continue
        seen.add(program)
        programs.append(program)

    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):
        if re.fullmatch(r"m\d+\.cf", name):
            os.remove(os.path.join(args.out, name))
    names = []
    for k, program in enumerate(programs):
        name = f"m{k:03d}.cf"
        with open(os.path.join(args.out, name), "w", encoding="utf-8", newline="") as f:
            f.write(program)
        names.append(name)

    oracle = os.path.join(ROOT, "tools", "parser-oracle.py")
    result = subprocess.run(
        [sys.executable, oracle] + names, cwd=args.out, capture_output=True, text=True, check=True
    )
    verdicts = [line for line in result.stdout.splitlines() if "\t" in line]
    if len(verdicts) != len(names):
        sys.exit(f"make-parser-corpus: the oracle answered for {len(verdicts)} of {len(names)} files")
    with open(os.path.join(args.out, "expected.tsv"), "w", encoding="utf-8") as f:
        f.write("# file\treference outcome (tools/parser-oracle.py); generated by tools/make-parser-corpus.py\n")
        for line in verdicts:
            f.write(line + "\n")
    accepted = sum(1 for v in verdicts if v.endswith("\tOK"))
    print(f"wrote {len(names)} programs to {args.out} ({accepted} accepted by the reference)")

    if args.compare:
        weft = subprocess.run(
            ["cargo", "run", "-q", "-p", "weft-tests", "--example", "parser_outcome", "--"]
            + [os.path.join(args.out, n) for n in names],
            cwd=ROOT, capture_output=True, text=True, check=True,
        )
        ours = {os.path.basename(l.split("\t")[0]): l.split("\t")[1] for l in weft.stdout.splitlines() if "\t" in l}
        for line in verdicts:
            name, theirs = line.split("\t")
            if ours.get(name) != theirs:
                print(f"{name}\tweft: {ours.get(name)}\treference: {theirs}")


if __name__ == "__main__":
    main()
