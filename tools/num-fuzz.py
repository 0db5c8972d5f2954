#!/usr/bin/env python3
"""Random arithmetic for differential testing of weft's numbers against the reference.

Writes models made of many random arithmetic expressions over ints (small, at the edges of
64 bits, and beyond), floats and booleans, with `+ - * / % **`, each printed twice: as a list
(`std::print([k, vk])`, Python's `repr`) and through string interpolation (`"sk={{vk}}"`,
the reference's own formatting). Expressions that Python itself cannot evaluate (division by
zero, complex results, overflow, infinities) are left out, so one model holds hundreds of
expressions and one reference run checks them all.

With `--formats`, the models print f-strings instead (`f"{v:SPEC}"`), each with a random
format specification that Python accepts for the value: fill, alignment, sign, `#`, zero
padding, width, grouping, precision and type.

Usage:
  num-fuzz.py --seed S --count N --out DIR [--expressions 150] [--formats]
      writes DIR/num_<S>_<i>/main.cf (DIR/fmt_<S>_<i> with --formats) for i in 0..N
then record and compare, as for tools/eval-fuzz.py:
  INMANTA_REF_VENV=... python3 ../shared/tools/oracle.py DIR/num_*
  python3 tools/eval-fuzz.py --check DIR/num_* --weft target/release/weft

Every sub-expression is parenthesised and negative numbers are parenthesised literals, so
Python and the Inmanta language read the same tree (in the language `-2 ** 2` is `(-2) ** 2`).
"""

import argparse
import os
import random

ATOMS = [
    "0", "1", "2", "3", "7", "(-1)", "(-3)", "10", "255", "256", "1000", "(-1000)",
    "0.5", "1.5", "(-2.5)", "0.1", "3.0", "true", "false",
    "(2 ** 62)", "(2 ** 63)", "(0 - 2 ** 64)", "(10 ** 20)", "(10 ** 30)", "(2 ** 53 + 1)",
    "9007199254740993",
]
OPERATORS = ["+", "-", "*", "/", "%", "**"]
EXPONENTS = ["0", "1", "2", "3", "(-1)", "(-2)", "0.5", "2.0", "10"]


def expression(r: random.Random, depth: int) -> str:
    if depth == 0 or r.random() < 0.3:
        return r.choice(ATOMS)
    op = r.choice(OPERATORS)
    left = expression(r, depth - 1)
    right = r.choice(EXPONENTS) if op == "**" else expression(r, depth - 1)
    return f"({left} {op} {right})"


def python_value(text: str):
    """The value Python gives, or None when Python fails or leaves the real numbers."""
    try:
        value = eval(text.replace("true", "True").replace("false", "False"), {})
    except Exception:
        return None
    if isinstance(value, complex):
        return None
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, int) and abs(value) > 10 ** 200:
        return None
    return value


VALUES = ["0", "1", "(-7)", "42", "1000000", "(2 ** 70)", "0.5", "(-2.25)", "3.14159", "1234.5678",
          "0.0001", "100.0", "(1 / 3)", "true", "false", '"ab"', '""', '"weft"']


def format_spec(r: random.Random) -> str:
    """A random format specification: [[fill]align][sign][z][#][0][width][grouping][.precision][type]."""
    spec = ""
    if r.random() < 0.4:
        spec += (r.choice("*-_ 0x") if r.random() < 0.5 else "") + r.choice("<>^=")
    if r.random() < 0.3:
        spec += r.choice("+- ")
    if r.random() < 0.15:
        spec += "#"
    if r.random() < 0.2:
        spec += "0"
    if r.random() < 0.5:
        spec += str(r.randint(0, 12))
    if r.random() < 0.2:
        spec += r.choice(",_")
    if r.random() < 0.4:
        spec += "." + str(r.randint(0, 8))
    if r.random() < 0.6:
        spec += r.choice("bcdeEfFgGnosxX%")
    return spec


def python_format(value_text: str, spec: str):
    try:
        value = eval(value_text.replace("true", "True").replace("false", "False"), {})
        # The reference formats a float with an integral value as the int it equals.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return format(value, spec)
    except Exception:
        return None


def format_model(seed: int, index: int, count: int) -> str:
    r = random.Random(f"num-fuzz-format:{seed}:{index}")
    lines = []
    k = 0
    while k < count:
        value, spec = r.choice(VALUES), format_spec(r)
        if python_format(value, spec) is None or "{" in spec or "}" in spec:
            continue
        lines.append(f"f{k} = {value}")
        lines.append(f'std::print(f"[{k}] {{f{k}:{spec}}}|")')
        k += 1
    return "\n".join(lines) + "\n"


def model(seed: int, index: int, count: int) -> str:
    r = random.Random(f"num-fuzz:{seed}:{index}")
    lines = []
    k = 0
    while k < count:
        text = expression(r, r.randint(1, 3))
        if python_value(text) is None:
            continue
        lines.append(f"v{k} = {text}")
        lines.append(f"std::print([{k}, v{k}])")
        # `=` rather than a space: oracle.py takes a long number after a word and a space for
        # a memory address.
        lines.append(f'std::print("s{k}={{{{v{k}}}}}")')
        k += 1
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--expressions", type=int, default=150)
    parser.add_argument("--formats", action="store_true", help="f-strings with random format specifications instead")
    args = parser.parse_args()
    for i in range(args.count):
        case = os.path.join(args.out, f"{'fmt' if args.formats else 'num'}_{args.seed}_{i}")
        os.makedirs(case, exist_ok=True)
        with open(os.path.join(case, "main.cf"), "w") as f:
            make = format_model if args.formats else model
            f.write(make(args.seed, i, args.expressions))
    print(f"wrote {args.count} models to {args.out}")


if __name__ == "__main__":
    main()
