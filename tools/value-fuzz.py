#!/usr/bin/env python3
"""Random numbers, format specifications and values: differential models for the reference.

Writes models made of many random arithmetic expressions over ints (small, at the edges of
64 bits, and beyond), floats and booleans, with `+ - * / % **` (some of them compared or
tested for membership), each printed twice: as a list
(`std::print([k, vk])`, Python's `repr`) and through string interpolation (`"sk={{vk}}"`,
the reference's own formatting). Expressions that Python itself cannot evaluate (division by
zero, complex results, overflow, infinities) are left out, so one model holds hundreds of
expressions and one reference run checks them all.

With `--formats`, the models print f-strings instead (`f"{v:SPEC}"`), each with a random
format specification that Python accepts for the value: fill, alignment, sign, `#`, zero
padding, width, grouping, precision and type.

With `--values`, the models hold random nested values (scalars, lists, dicts; strings with
quotes, escapes and non-ASCII letters) and print each as a list element, through string
interpolation and through an f-string with and without `!r`.

Usage:
  value-fuzz.py --seed S --count N --out DIR [--expressions 150] [--formats | --values]
      writes DIR/num_<S>_<i>/main.cf (fmt_ with --formats, val_ with --values) for i in 0..N
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
# No fractional exponent: a negative base would make a complex number, which the reference
# refuses in any further arithmetic and weft does not have (ARCHITECTURE.md).
EXPONENTS = ["0", "1", "2", "3", "(-1)", "(-2)", "2.0", "10"]


def expression(r: random.Random, depth: int) -> str:
    if depth == 0 or r.random() < 0.3:
        return r.choice(ATOMS)
    op = r.choice(OPERATORS)
    left = expression(r, depth - 1)
    right = r.choice(EXPONENTS) if op == "**" else expression(r, depth - 1)
    return f"({left} {op} {right})"


def python_eval(text: str):
    """A language expression of numbers and booleans, evaluated by Python (raises as Python does)."""
    return eval(text.replace("true", "True").replace("false", "False"), {})


def python_value(text: str):
    """The value Python gives, or None when Python fails or leaves the real numbers."""
    try:
        value = python_eval(text)
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
        value = python_eval(value_text)
        # The reference formats a float with an integral value as the int it equals.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return format(value, spec)
    except Exception:
        return None


def format_model(seed: int, index: int, count: int) -> str:
    r = random.Random(f"value-fuzz-format:{seed}:{index}")
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


SCALARS = ["0", "(-3)", "1000", "(2 ** 70)", "0.5", "(-2.25)", "(1 / 3)", "100.0", "(10 ** 16 * 1.0)",
           "true", "false", "null", '"ab"', '""', '"it\'s"', '"say \\"hi\\""', '"tab\\there"', '"né"']


def value_text(r: random.Random, depth: int) -> str:
    """A random value literal: scalars, lists and dicts, nested."""
    k = r.random()
    if depth <= 0 or k < 0.5:
        return r.choice(SCALARS)
    if k < 0.75:
        # Lists in a list literal are flattened; keep nested lists inside dicts.
        return "[" + ", ".join(value_text(r, 0) for _ in range(r.randint(0, 3))) + "]"
    keys = r.sample(["a", "b", "k1", "x y"], r.randint(0, 3))
    return "{" + ", ".join(f'"{key}": {value_text(r, depth - 1)}' for key in keys) + "}"


def values_model(seed: int, index: int, count: int) -> str:
    r = random.Random(f"value-fuzz-values:{seed}:{index}")
    lines = []
    for k in range(count):
        lines.append(f"w{k} = {value_text(r, 2)}")
        lines.append(f"std::print([{k}, w{k}])")
        lines.append(f'std::print("i{k}={{{{w{k}}}}}")')
        lines.append(f'std::print(f"f{k}={{w{k}}}|{{w{k}!r}}")')
    return "\n".join(lines) + "\n"


def model(seed: int, index: int, count: int) -> str:
    r = random.Random(f"value-fuzz:{seed}:{index}")
    lines = []
    k = 0
    while k < count:
        text = expression(r, r.randint(1, 3))
        if r.random() < 0.3:
            # Comparisons and membership across ints, big ints, floats and booleans.
            other = expression(r, r.randint(0, 2))
            if r.random() < 0.2:
                text = f"({text} in [{other}, {expression(r, 0)}])"
            else:
                text = f"({text} {r.choice(['==', '!=', '<', '>', '<=', '>='])} {other})"
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
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--formats", action="store_true", help="f-strings with random format specifications instead")
    mode.add_argument("--values", action="store_true", help="nested values printed every way instead")
    args = parser.parse_args()
    kind, make = ("fmt", format_model) if args.formats else ("val", values_model) if args.values else ("num", model)
    for i in range(args.count):
        case = os.path.join(args.out, f"{kind}_{args.seed}_{i}")
        os.makedirs(case, exist_ok=True)
        with open(os.path.join(case, "main.cf"), "w") as f:
            f.write(make(args.seed, i, args.expressions))
    print(f"wrote {args.count} models to {args.out}")


if __name__ == "__main__":
    main()
