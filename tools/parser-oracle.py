#!/usr/bin/env python3
"""Ask the reference parser (inmanta-core) whether .cf files parse.

Usage: tools/parser-oracle.py [--detail | --tree] FILE...

Prints one line per file, tab-separated:

    FILE<TAB>OK
    FILE<TAB>ERR <line> <kind>

where <kind> is the class name of the exception the reference raised (ParserException,
InvalidNamespaceAccess, HyphenException, DuplicateException, ...) and <line> is the line it
reported, or `-` when the exception carries no location (a raw Python error such as
UnicodeDecodeError). With --detail, an error line also gives the column and the message:

    FILE<TAB>ERR <line>:<col> <kind> <message>

With --tree, an accepted file is followed by the reference's syntax tree, one top-level statement
per line as an S-expression, for reading next to weft's AST dump. The tree is the reference's
own, desugarings included: `not in` is `(not (in ..))`, `d[k] is defined` is a conjunction,
comprehensions are nested, constant lists and dicts are folded to literals, and an `elif` is an
`if` in an else block. Block statements are shown in source order (the reference stores them
reversed).

Only the parser runs: no project, no module loading, no evaluation. The reference appends a
newline to every file before parsing, so an unexpected end of file is reported on the line after
the last one.

The script needs inmanta-core importable. When it is not, it re-runs itself with the Python of
the reference's virtual environment: $INMANTA_REF_PYTHON, or ~/.cache/inmanta-ref/venv/bin/python.
"""

import os
import sys


def reexec_with_reference_python():
    python = os.environ.get("INMANTA_REF_PYTHON") or os.path.expanduser("~/.cache/inmanta-ref/venv/bin/python")
    if not os.path.exists(python) or os.path.realpath(python) == os.path.realpath(sys.executable):
        sys.exit("parser-oracle: inmanta-core is not importable; set INMANTA_REF_PYTHON to a Python that has it")
    os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])


try:
    import inmanta.compiler  # noqa: F401  (initialises the modules the parser depends on)
    from inmanta.ast import Namespace
    from inmanta.parser import plyInmantaParser
except ImportError:
    reexec_with_reference_python()

import warnings

# The reference reports invalid escapes as warnings; they do not change the outcome.
warnings.simplefilter("ignore")


def outcome(path, detail):
    """The reference's verdict on one file, as printed after the tab."""
    root = Namespace("__root__")
    namespace = Namespace("__config__", root)
    try:
        plyInmantaParser.base_parse(namespace, path, None)
        return "OK"
    except Exception as error:  # noqa: BLE001  (every exception is an outcome to report)
        kind = type(error).__name__
        location = getattr(error, "location", None)
        line = getattr(location, "lnr", None)
        column = getattr(location, "start_char", None)
        where = "-" if line is None else str(line)
        if not detail:
            return f"ERR {where} {kind}"
        if line is not None and column is not None:
            where = f"{line}:{column}"
        message = getattr(error, "msg", None) or str(error)
        message = " ".join(str(message).split())
        return f"ERR {where} {kind} {message}"


def tree(path):
    """The reference's statements for `path` as S-expressions, one per top-level statement."""
    from inmanta.ast.constraint.expression import IsDefined, Not, Operator, Regex
    from inmanta.ast.statements import Literal
    from inmanta.ast.statements.assign import (
        Assign, CreateDict, CreateList, IndexLookup, MapLookup, SetAttribute, ShortIndexLookup, StringFormat,
        StringFormatV2,
    )
    from inmanta.ast.statements.call import FunctionCall
    from inmanta.ast.statements.define import (
        DefineEntity, DefineImplement, DefineImplementation, DefineImport, DefineIndex, DefineRelation,
        DefineTypeConstraint,
    )
    from inmanta.ast.statements.generator import (
        ConditionalExpression, Constructor, For, If, ListComprehension, WrappedKwargs,
    )
    from inmanta.ast.variables import AttributeReference, Reference
    from inmanta.execute.util import NoneValue

    def value(v):
        if v is None or isinstance(v, NoneValue):
            return "null"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + " ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + " ".join(f"{k!r}:{value(x)}" for k, x in v.items()) + "}"
        return repr(v)

    def kwargs(pairs, wrapped):
        return " ".join([f"{k}={expr(v)}" for k, v in pairs] + [expr(w) for w in wrapped])

    def expr(x):
        # Order matters: subclasses before their bases.
        if isinstance(x, Regex):
            return f"(regex {expr(x._arguments[0])} /{x.regex.pattern}/)"
        if isinstance(x, Not):
            return f"(not {expr(x._arguments[0])})"
        if isinstance(x, Operator):
            return f"({x.get_op()} " + " ".join(expr(a) for a in x._arguments) + ")"
        if isinstance(x, (StringFormatV2, StringFormat)):
            name = "fstring" if isinstance(x, StringFormatV2) else "format"
            variables = x._variables.items() if isinstance(x._variables, dict) else x._variables
            return f"({name} {x._format_string!r} " + " ".join(f"[{expr(r)} {m!r}]" for r, m in variables) + ")"
        if isinstance(x, Literal):
            return f"(lit {value(x.value)})"
        if isinstance(x, AttributeReference):
            return f"(attr {expr(x.instance)} {x.attribute})"
        if isinstance(x, Reference):
            return f"(ref {x.name})"
        if isinstance(x, MapLookup):
            return f"(lookup {expr(x.themap)} {expr(x.key)})"
        if isinstance(x, ShortIndexLookup):
            return f"(select {expr(x.rootobject)} {x.relation} {kwargs(x.querypart, x.wrapped_querypart)})"
        if isinstance(x, IndexLookup):
            return f"(index {x.index_type} {kwargs(x.query, x.wrapped_query)})"
        if isinstance(x, FunctionCall):
            args = " ".join(expr(a) for a in x.arguments)
            return f"(call {x.name} {args} | {kwargs(list(x.kwargs.items()), x.wrapped_kwargs)})"
        if isinstance(x, Constructor):
            wrapped = x._Constructor__wrapped_kwarg_attributes
            return f"(new {x.class_type} {kwargs(list(x.get_attributes().items()), wrapped)})"
        if isinstance(x, CreateList):
            return "(list " + " ".join(expr(a) for a in x.items) + ")"
        if isinstance(x, CreateDict):
            return "(dict " + " ".join(f"{k!r}:{expr(v)}" for k, v in x.items) + ")"
        if isinstance(x, ListComprehension):
            guard = expr(x.guard) if x.guard is not None else "-"
            return f"(comp {expr(x.value_expression)} {x.loop_var} {expr(x.iterable)} {guard})"
        if isinstance(x, ConditionalExpression):
            return f"(? {expr(x.condition)} {expr(x.if_expression)} {expr(x.else_expression)})"
        if isinstance(x, IsDefined):
            return f"(isdefined {expr(x.attr) if x.attr is not None else '-'} {x.name})"
        if isinstance(x, WrappedKwargs):
            return f"(** {expr(x.dictionary)})"
        return f"?{type(x).__name__}"

    def block(b):
        return "(block " + " ".join(stmt(x) for x in reversed(b.get_stmts())) + ")"

    def doc(x):
        comment = getattr(x, "comment", None)
        return f" doc={str(comment)!r}" if comment is not None else ""

    def stmt(x):
        if isinstance(x, Assign):
            return f"(= {x.name} {expr(x.value)})"
        if isinstance(x, SetAttribute):
            return f"(setattr {expr(x.instance)} {x.attribute_name} {'+=' if x.list_only else '='} {expr(x.value)})"
        if isinstance(x, For):
            return f"(for {x.loop_var} {expr(x.base)} {block(x.module)})"
        if isinstance(x, If):
            return f"(if {expr(x.condition)} {block(x.if_branch)} {block(x.else_branch)})"
        if isinstance(x, DefineEntity):
            attributes = []
            for a in x.attributes:
                t = a.type
                ty = str(t.basetype) + ("[]" if t.multi else "") + ("?" if t.nullable else "")
                # `string x` and `string x = undef` are the same to the reference: both remove an
                # inherited default.
                default = expr(a.default) if a.default is not None else "-"
                attributes.append(f"(attribute {ty} {a.name} {default})")
            parents = ",".join(str(p) for p in x.parents)
            return f"(entity {x.name} [{parents}]{doc(x)} " + " ".join(attributes) + ")"
        if isinstance(x, DefineImplementation):
            return f"(implementation {x.name} {x.entity}{doc(x)} {block(x.block)})"
        if isinstance(x, DefineImplement):
            names = ",".join(str(i) for i in x.implementations)
            return f"(implement {x.entity} [{names}] parents={x.inherit} when={expr(x.select)}{doc(x)})"
        if isinstance(x, DefineTypeConstraint):
            return f"(typedef {x.name} {x.basetype} {expr(x.get_expression())}{doc(x)})"
        if isinstance(x, DefineRelation):
            # Each side is (entity, the attribute on the *other* entity, its multiplicity).
            def side(s):
                entity, name, multi = s
                return f"{entity}.{name}{list(multi)}" if name else str(entity)

            annotations = " ".join(expr(a) for _, a in x.annotation_expression)
            return f"(relation {side(x.left)} {side(x.right)} [{annotations}]{doc(x)})"
        if isinstance(x, DefineIndex):
            return f"(index {x.type} [{','.join(str(a) for a in x.attributes)}])"
        if isinstance(x, DefineImport):
            return f"(import {x.name} as {x.toname})"
        if type(x).__name__ == "LocatableString":
            return f"(module-docstring {str(x)!r})"
        return expr(x)

    root = Namespace("__root__")
    namespace = Namespace("__config__", root)
    return [stmt(s) for s in plyInmantaParser.base_parse(namespace, path, None)]


def main(argv):
    detail = "--detail" in argv
    show_tree = "--tree" in argv
    paths = [a for a in argv if a not in ("--detail", "--tree")]
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        verdict = outcome(path, detail)
        print(f"{path}\t{verdict}", flush=True)
        if show_tree and verdict == "OK":
            for line in tree(path):
                print(f"    {line}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
