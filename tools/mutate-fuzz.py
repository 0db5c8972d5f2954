#!/usr/bin/env python3
"""Mutation differential tester: whole compiles of mutated conformance models, weft against the
reference compiler.

Takes the conformance models (tests/conformance/<area>/<case>/main.cf, with their libs/ copied
along), applies one to three *semantic* mutations to a randomly chosen one and runs a full
compile of the result with the reference (`/work/shared/tools/oracle.py`, which writes
expect.json) and with weft, then reports the mutants where they disagree. Unlike
tools/make-parser-corpus.py (token-level edits, parser only), the mutations know the structure
of a model (statements, blocks, entity attributes, relations, implement/index statements,
constructor calls), so most mutants still parse and reach the checker and the evaluator:

  rename-use      an identifier use (variable, attribute after `.`, keyword argument, entity)
                  becomes another one in scope, or an unknown one
  rename-def      a definition (variable, attribute, entity, implementation) gets another
                  definition's name (a duplicate) or a fresh one (its uses become unknown)
  attr-type       an attribute's type becomes int/string/bool/float/number/string[]/dict/
                  nullable/an entity/an unknown type
  multiplicity    a relation end's multiplicity becomes [0:1], [1], [0:], [2:3], ...
  relation-end    a relation end names another entity, or the reverse end is dropped
  drop-default    an attribute's `= default` is removed
  add-default     an attribute gets a default (of its type, or of another)
  swap            two sibling statements (or blocks) change places
  delete          a statement or block is removed
  duplicate       an entity/implementation/index/typedef/relation/implement definition is repeated
  literal         a literal changes type ("1", 1, 1.5, true, null, [], {}, ...)
  when            an `implement` gets a `when` condition (or its condition is replaced/extended)
  impl-target     an `implement ... using` target (or its entity) changes, or a target is added
  index-attrs     an index's attribute list changes
  assign-twice    an attribute assignment is repeated (same or other value), or a new one is
                  added for a constructed instance or for `self` in an implementation
  plus-assign     `x.a = v` becomes `x.a += v`
  insert-read     a `std::print` of an attribute (or relation path) of an instance is inserted
                  at a random place, at top level or in an implementation
  extends         an entity's parent list changes (added, replaced, removed, cycle)
  flip            a comparison/boolean operator or a boolean literal is flipped
  wrap            a top-level statement is wrapped in `for ... in [1, 2]:` / `if ...:`
  move-into       a top-level statement moves into an implementation, `for` or `if` body
  kwarg           a constructor keyword argument is dropped, added or repeated
  reflow          a statement is split over lines after a bracket or a comma (locations of
                  errors in multi-line statements)
  interp          a name in a `{{a.b}}` interpolation or an f-string field changes
  lookup          an index lookup `E[k=v]` is inserted (printed or assigned)
  dup-stmt        a constructor call, assignment or other statement is repeated

Usage:
  mutate-fuzz.py --seeds 1,2,3 --count N [--out DIR] [--weft PATH] [--jobs 1] [--oracle PATH]
                 [--venv DIR] [--max-mutations 3] [--no-oracle] [--only MUT,...]
      generate N mutants per seed (deterministic from the seed and the corpus) as
      DIR/gen/<seed>_<i>/main.cf (DIR defaults to /tmp/mutfuzz) with a mutation.txt naming
      the source case and the mutations applied (with the line each applied to, counted in the
      text as it was at that step), run the oracle on them with --jobs reference jobs (writes
      expect.json), run weft on each and print every disagreement and every weft problem,
      then a summary grouped by kind of disagreement. Per-case results go to
      DIR/results/<seed>.json.
      --no-oracle  reuse the expect.json files already present (e.g. to re-check a new weft)
      --only       use only these mutations (names above)
      A disagreement of a mutant whose source case is in tests/conformance/known-divergences.tsv
      is grouped apart ("known divergence of the source"), as it may be that divergence.
  mutate-fuzz.py --check CASE_DIR [...] [--weft PATH]
      compare weft with existing expect.json files (no generation, no oracle run), with the
      same problem checks.
  mutate-fuzz.py --show --seed S --index I
      print the mutant that seed S generates as case I (and its mutation.txt), running nothing.

To shrink a disagreeing mutant, use `tools/eval-fuzz.py --reduce CASE --out DIR --jobs 1`
(its reducer removes statements while the disagreement keeps its kind) and finish by hand.

The reference venv comes from --venv, else $INMANTA_REF_VENV, else ~/.cache/inmanta-ref/venv.
Comparison rule: tools/eval-fuzz.py's `mismatch` (the rule of tests/tests/conformance.rs), used
through its `run_weft`: the status must match; for ok, the sorted prints must be equal; for an
error, the kind and (when the reference gives one) the line, ZeroDivisionError and
ModuleNotFoundError only needing an error; a first cause weft reports must match.
Besides disagreements, a weft PROBLEM is reported for: a panic message on stderr, an exit
status other than 0 or 1 (weft exits 2 only when it cannot run at all, e.g. no such directory),
an exit status that does not match the diagnostics (1 without an error, 0 with one), a run over
10 s (killed after 30 s), and a JSON diagnostic without file, line and column (marked "the
reference gives no location either" when the reference's error has no line, as for
UnsetException).
Exit status: 1 if there were disagreements or problems, 0 otherwise.

Only the Python standard library is used.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


EVAL = _load("eval_fuzz", ROOT / "tools" / "eval-fuzz.py")  # run_weft, mismatch, signature
PCORPUS = _load("make_parser_corpus", ROOT / "tools" / "make-parser-corpus.py")  # TOKEN
TOKEN = PCORPUS.TOKEN

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
KEYWORDS = {
    "entity", "end", "implementation", "for", "if", "elif", "else", "implement", "using", "when",
    "index", "typedef", "as", "matching", "import", "in", "and", "or", "not", "is", "defined",
    "extends", "true", "false", "null", "parents", "dict", "list", "string", "int", "bool",
    "float", "number", "any", "from", "undef",
}
TYPES = ["int", "string", "bool", "float", "number", "string[]", "int[]", "bool[]", "dict", "list",
         "int?", "string?", "bool?", "dict?", "string[]?", "float?", "std::port", "any", "nosuchtype"]
MULTS = ["[0:1]", "[1]", "[0:]", "[1:]", "[2:3]", "[0:2]", "[1:1]", "[2]", "[2:]", "[:2]"]
LITERALS = ['"1"', "1", "true", "null", "[]", "1.5", '"x"', "{}", "[1, 2]", '["a"]', '{"a": 1}',
            "false", "0", "-1", '""', '["a", "a"]']
TYPED_LITERALS = {"int": ["3", "0", "-2"], "string": ['"s"', '""', '"h1"'], "bool": ["true", "false"],
                  "float": ["1.5", "2.0"], "number": ["4", "0.5"], "string[]": ['["a"]', "[]"],
                  "int[]": ["[1, 2]", "[]"], "bool[]": ["[true]"], "dict": ['{"k": 1}', "{}"],
                  "list": ["[1, \"a\"]", "[]"]}
FLIPS = {"==": "!=", "!=": "==", "<": ">=", ">": "<=", "<=": ">", ">=": "<", "and": "or",
         "or": "and", "true": "false", "false": "true"}
UNKNOWN_VAR, UNKNOWN_ATTR, UNKNOWN_TYPE, UNKNOWN_IMPL = "nosuch", "nosuch_attr", "Nosuch", "nosuch_impl"


def is_name(t: str) -> bool:
    return bool(NAME_RE.fullmatch(t))


def is_sig(t: str) -> bool:
    return not (t.isspace() or t.startswith("#"))


# --------------------------------------------------------------------------------------------
# Structure of a model: statements (token spans) and blocks
# --------------------------------------------------------------------------------------------


class Stmt:
    def __init__(self, start: int, end: int, sig: list[int]):
        self.start, self.end, self.sig = start, end, sig  # token span [start, end), significant tokens
        self.kind = "?"
        self.node = None


class Node:
    """A statement or a block (entity, implementation, for, if). `branch` nodes are the
    `elif`/`else:` lines of an if block; they cannot be moved."""

    def __init__(self, kind: str, header: Stmt | None, parent: "Node | None"):
        self.kind, self.header, self.parent = kind, header, parent
        self.children: list[Node] = []
        self.end_stmt: Stmt | None = None
        self.start = header.start if header else 0
        self.end = header.end if header else 0

    def movable_children(self):
        return [c for c in self.children if c.kind != "branch"]


class Model:
    def __init__(self, text: str):
        if not text.endswith("\n"):
            text += "\n"
        self.text = text
        self.toks = TOKEN.findall(text)
        assert "".join(self.toks) == text
        self.depth = [0] * len(self.toks)
        self.stmts = self._split()
        self.root = self._tree()
        self._collect()

    # --- token helpers
    def line_of(self, i: int) -> int:
        return sum(1 for t in self.toks[:i] if t == "\n") + 1

    def replace(self, edits: list[tuple[int, int, str]]) -> str:
        toks = list(self.toks)
        for i, j, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
            toks[i:j] = [new]
        return "".join(toks)

    def src(self, i: int, j: int) -> str:
        return "".join(self.toks[i:j])

    def stmt_text(self, st: Stmt) -> str:
        return " ".join(self.src(st.sig[0], st.sig[-1] + 1).split())

    def prev_sig(self, st: Stmt, i: int) -> str | None:
        k = st.sig.index(i)
        return self.toks[st.sig[k - 1]] if k > 0 else None

    def next_sig(self, st: Stmt, i: int) -> str | None:
        k = st.sig.index(i)
        return self.toks[st.sig[k + 1]] if k + 1 < len(st.sig) else None

    def indent_of(self, st: Stmt) -> str:
        t = self.toks[st.start]
        return t if t.isspace() and t != "\n" else ""

    # --- structure
    def _split(self) -> list[Stmt]:
        stmts, depth, sig, linestart, start = [], 0, [], 0, 0
        for i, t in enumerate(self.toks):
            self.depth[i] = depth
            if t == "\n":
                if depth == 0:
                    if sig:
                        stmts.append(Stmt(start, i + 1, sig))
                        sig = []
                    linestart = i + 1
                continue
            if not is_sig(t):
                continue
            if not sig:
                start = linestart
            sig.append(i)
            if t in ("(", "[", "{"):
                depth += 1
            elif t in (")", "]", "}"):
                depth = max(0, depth - 1)
                self.depth[i] = depth
        if sig:
            stmts.append(Stmt(start, len(self.toks), sig))
        return stmts

    def _tree(self) -> Node:
        root = Node("root", None, None)
        root.end = len(self.toks)
        stack = [root]
        for st in self.stmts:
            first, last = self.toks[st.sig[0]], self.toks[st.sig[-1]]
            top = stack[-1]
            if first in ("entity", "implementation", "for", "if") and last == ":":
                n = Node(first, st, top)
                top.children.append(n)
                stack.append(n)
                st.kind = first
            elif first in ("elif", "else") and top.kind == "if":
                top.children.append(Node("branch", st, top))
                st.kind = "branch"
            elif first == "end" and len(stack) > 1:
                n = stack.pop()
                n.end_stmt, n.end = st, st.end
                st.kind = "end"
            else:
                n = Node("stmt", st, top)
                top.children.append(n)
                st.kind = self._classify(st, top.kind)
            st.node = top
        for n in stack[1:]:  # unclosed blocks run to the end
            n.end = len(self.toks)
        return root

    def _classify(self, st: Stmt, parent_kind: str) -> str:
        s = [self.toks[i] for i in st.sig]
        if parent_kind == "entity":
            return "attr" if self._parse_attr(st) else "entity-other"
        if s[0] in ("implement", "index", "typedef", "import"):
            return s[0]
        if "--" in s:
            return "relation"
        if len(s) >= 2 and is_name(s[0]) and s[1] in ("=", "+="):
            return "assign"
        k = 0
        while k + 2 < len(s) and is_name(s[k]) and s[k + 1] == ".":
            k += 2
        if k > 0 and is_name(s[k]) and k + 1 < len(s) and s[k + 1] in ("=", "+="):
            return "attr-assign"
        return "expr"

    def _parse_attr(self, st: Stmt):
        """(type_start, type_end, name_idx, eq_idx or None) of an attribute declaration."""
        sig, toks = st.sig, self.toks
        k = 0
        if not is_name(toks[sig[0]]) or toks[sig[0]] in ("end",):
            return None
        k = 1
        while k + 1 < len(sig) and toks[sig[k]] == "::" and is_name(toks[sig[k + 1]]):
            k += 2
        if k + 1 < len(sig) and toks[sig[k]] == "[" and toks[sig[k + 1]] == "]":
            k += 2
        if k < len(sig) and toks[sig[k]] == "?":
            k += 1
        if k >= len(sig) or not is_name(toks[sig[k]]):
            return None
        eq = None
        if k + 1 < len(sig):
            if toks[sig[k + 1]] != "=":
                return None
            eq = sig[k + 1]
        return (sig[0], sig[k - 1] + 1, sig[k], eq)

    def _collect(self):
        toks = self.toks
        self.entities: dict[str, dict] = {}
        self.impls: dict[str, str] = {}
        self.vars: dict[str, str | None] = {}
        self.loopvars: set[str] = set()
        self.relations: list[dict] = []
        self.leaves: list[Node] = []
        self.blocks: list[Node] = []

        def walk(n: Node):
            for c in n.children:
                if c.kind == "stmt":
                    self.leaves.append(c)
                elif c.kind != "branch":
                    self.blocks.append(c)
                    walk(c)
        walk(self.root)
        for b in self.blocks:
            s = [toks[i] for i in b.header.sig]
            if b.kind == "entity" and len(s) >= 3 and is_name(s[1]):
                parents = []
                if "extends" in s:
                    parents = [t for t in s[s.index("extends") + 1:-1] if is_name(t)]
                attrs = []
                for c in b.children:
                    if c.kind == "stmt" and c.header.kind == "attr":
                        ts, te, ni, eq = self._parse_attr(c.header)
                        attrs.append({"stmt": c.header, "ts": ts, "te": te, "name": toks[ni], "ni": ni,
                                      "eq": eq, "type": self.src(ts, te).replace(" ", "")})
                self.entities[s[1]] = {"node": b, "parents": parents, "attrs": attrs, "name_idx": b.header.sig[1]}
            elif b.kind == "implementation" and len(s) >= 5 and s[2] == "for":
                self.impls[s[1]] = s[3]
            elif b.kind == "for" and len(s) >= 2:
                self.loopvars.add(s[1])
        for leaf in self.leaves:
            st = leaf.header
            s = [toks[i] for i in st.sig]
            if st.kind == "assign" and leaf.parent is self.root:
                ent = s[2] if len(s) >= 4 and s[3] == "(" and s[2] in self.entities else None
                if s[0] not in self.vars or ent:
                    self.vars[s[0]] = ent
            elif st.kind == "relation":
                self._parse_relation(st)

    def _parse_relation(self, st: Stmt):
        toks, sig = self.toks, st.sig
        s = [toks[i] for i in sig]
        cut = s.index("--")
        ends = []
        for lo, hi in ((0, cut), (cut + 1, len(s))):
            k = lo
            ent_start = sig[k]
            while k + 2 < hi and s[k + 1] == "::":
                k += 2
            end = {"ent_lo": ent_start, "ent_hi": sig[k] + 1, "ent": s[k], "attr": None, "attr_idx": None,
                   "mult": None, "lo_idx": sig[lo], "hi_idx": sig[hi - 1] + 1}
            k += 1
            if k + 1 < hi and s[k] == "." and is_name(s[k + 1]):
                end["attr"], end["attr_idx"] = s[k + 1], sig[k + 1]
                k += 2
            if k < hi and s[k] == "[":
                m = k
                while m < hi and s[m] != "]":
                    m += 1
                if m < hi:
                    end["mult"] = (sig[k], sig[m] + 1)
            ends.append(end)
        if len(ends) == 2:
            self.relations.append({"stmt": st, "ends": ends})

    # --- model queries
    def attrs_of(self, ent: str, seen=None) -> list[tuple[str, str]]:
        """(name, type) of the attributes of an entity, inherited ones included; relation ends
        have type `rel:<entity>:<mult>`."""
        seen = seen or set()
        if ent in seen or ent not in self.entities:
            return []
        seen.add(ent)
        out = [(a["name"], a["type"]) for a in self.entities[ent]["attrs"]]
        for r in self.relations:
            a, b = r["ends"]
            if a["ent"] == ent and a["attr"]:
                out.append((a["attr"], f"rel:{b['ent']}:{self.src(*a['mult']) if a['mult'] else ''}"))
            if b["ent"] == ent and b["attr"]:
                out.append((b["attr"], f"rel:{a['ent']}:{self.src(*b['mult']) if b['mult'] else ''}"))
        for p in self.entities[ent]["parents"]:
            out.extend(self.attrs_of(p, seen))
        return out

    def all_attr_names(self) -> list[str]:
        names = {n for e in self.entities for n, _ in self.attrs_of(e)}
        return sorted(names)

    def top_boundaries(self) -> list[int]:
        return [c.start for c in self.root.children] + [len(self.toks)]

    def child_indent(self, block: Node) -> str:
        for c in block.movable_children():
            return self.indent_of(c.header)
        return self.indent_of(block.header) + "    "

    def ctor_calls(self):
        """(entity token index, open paren, close paren, [(arg_lo, arg_hi, kw name or None)])."""
        out = []
        toks = self.toks
        for st in self.stmts:
            if st.kind in ("relation", "index", "implement", "typedef", "attr"):
                continue
            for k, i in enumerate(st.sig[:-1]):
                t = toks[i]
                if not (is_name(t) and t[0].isupper() and toks[st.sig[k + 1]] == "("):
                    continue
                open_i = st.sig[k + 1]
                depth, args, cur = 0, [], []
                close = None
                for j in st.sig[k + 1:]:
                    tj = toks[j]
                    if tj in ("(", "[", "{"):
                        depth += 1
                        if depth == 1:
                            continue
                    elif tj in (")", "]", "}"):
                        depth -= 1
                        if depth == 0:
                            close = j
                            break
                    if depth == 1 and tj == ",":
                        if cur:
                            args.append(cur)
                        cur = []
                        continue
                    cur.append(j)
                if close is None:
                    continue
                if cur:
                    args.append(cur)
                arglist = []
                for a in args:
                    kw = toks[a[0]] if len(a) >= 2 and is_name(toks[a[0]]) and toks[a[1]] == "=" else None
                    arglist.append((a[0], a[-1] + 1, kw))
                out.append((i, open_i, close, arglist))
        return out


# --------------------------------------------------------------------------------------------
# Mutations: each takes (model, rng) and returns (new text, description) or None
# --------------------------------------------------------------------------------------------


def typed_literal(rng, typ: str) -> str:
    base = typ.rstrip("?")
    if typ.endswith("?") and rng.random() < 0.3:
        return "null"
    if base in TYPED_LITERALS and rng.random() < 0.6:
        return rng.choice(TYPED_LITERALS[base])
    return rng.choice(LITERALS)


def at(m: Model, i: int) -> str:
    return f"line {m.line_of(i)}"


def m_rename_use(m: Model, rng):
    toks = m.toks
    cands = []
    for st in m.stmts:
        if st.kind not in ("assign", "attr-assign", "expr", "for", "if", "branch"):
            continue
        for k, i in enumerate(st.sig):
            t = toks[i]
            if not is_name(t) or (t in KEYWORDS and t != "self"):
                continue
            prev, nxt = m.prev_sig(st, i), m.next_sig(st, i)
            if prev == "::" or nxt == "::":
                continue
            if k == 0 and st.kind == "assign":
                continue
            if st.kind == "for" and k == 1:
                continue
            if prev == ".":
                cands.append((i, "attr"))
            elif nxt == "=" and m.depth[i] > 0:
                cands.append((i, "kwarg"))
            elif t[0].isupper():
                cands.append((i, "type"))
            elif nxt == "(":
                continue
            else:
                cands.append((i, "var"))
    if not cands:
        return None
    i, cat = rng.choice(cands)
    t = toks[i]
    if cat in ("attr", "kwarg"):
        pool, unknown = m.all_attr_names(), UNKNOWN_ATTR
    elif cat == "type":
        pool, unknown = list(m.entities), UNKNOWN_TYPE
    else:
        pool, unknown = sorted(set(m.vars) | m.loopvars | {"self"}), UNKNOWN_VAR
    pool = [p for p in pool if p != t]
    new = rng.choice(pool) if pool and rng.random() < 0.75 else unknown
    return m.replace([(i, i + 1, new)]), f"{at(m, i)}: {cat} `{t}` -> `{new}`"


def m_rename_def(m: Model, rng):
    toks = m.toks
    cands = []
    for leaf in m.leaves:
        if leaf.header.kind == "assign":
            cands.append((leaf.header.sig[0], "var"))
    for e, info in m.entities.items():
        cands.append((info["name_idx"], "entity"))
        for a in info["attrs"]:
            cands.append((a["ni"], "attr:" + e))
    for b in m.blocks:
        if b.kind == "implementation" and len(b.header.sig) > 1:
            cands.append((b.header.sig[1], "impl"))
    if not cands:
        return None
    i, cat = rng.choice(cands)
    t = toks[i]
    if cat == "var":
        pool, fresh = sorted(m.vars), t + "_renamed"
    elif cat == "entity":
        pool, fresh = list(m.entities), t + "Renamed"
    elif cat == "impl":
        pool, fresh = sorted(m.impls) + ["none"], t + "_renamed"
    else:
        pool = [a["name"] for a in m.entities[cat[5:]]["attrs"]]
        fresh = rng.choice([t + "_renamed", t.capitalize(), "self", "name"])
    pool = [p for p in pool if p != t]
    new = rng.choice(pool) if pool and rng.random() < 0.6 else fresh
    if new == t:
        return None
    return m.replace([(i, i + 1, new)]), f"{at(m, i)}: {cat.split(':')[0]} definition `{t}` -> `{new}`"


def m_attr_type(m: Model, rng):
    attrs = [a for e in m.entities.values() for a in e["attrs"]]
    if not attrs:
        return None
    a = rng.choice(attrs)
    pool = [t for t in TYPES + list(m.entities) if t != a["type"]]
    new = rng.choice(pool)
    return m.replace([(a["ts"], a["te"], new)]), f"{at(m, a['ts'])}: attribute `{a['name']}` type `{a['type']}` -> `{new}`"


def m_multiplicity(m: Model, rng):
    ends = [e for r in m.relations for e in r["ends"] if e["mult"]]
    if not ends:
        return None
    e = rng.choice(ends)
    old = m.src(*e["mult"])
    new = rng.choice([x for x in MULTS if x != old.replace(" ", "")])
    return m.replace([(e["mult"][0], e["mult"][1], new)]), f"{at(m, e['mult'][0])}: multiplicity {old} -> {new}"


def m_relation_end(m: Model, rng):
    if not m.relations:
        return None
    r = rng.choice(m.relations)
    a, b = r["ends"]
    if b["attr"] and rng.random() < 0.4:
        return (m.replace([(b["lo_idx"], b["hi_idx"], b["ent"])]),
                f"{at(m, b['lo_idx'])}: relation reverse end `{m.src(b['lo_idx'], b['hi_idx'])}` dropped")
    e = rng.choice([a, b])
    pool = [x for x in m.entities if x != e["ent"]] + [UNKNOWN_TYPE]
    new = rng.choice(pool)
    return m.replace([(e["ent_lo"], e["ent_hi"], new)]), f"{at(m, e['ent_lo'])}: relation end entity `{e['ent']}` -> `{new}`"


def m_drop_default(m: Model, rng):
    attrs = [a for e in m.entities.values() for a in e["attrs"] if a["eq"] is not None]
    if not attrs:
        return None
    a = rng.choice(attrs)
    last = a["stmt"].sig[-1]
    return m.replace([(a["ni"] + 1, last + 1, "")]), f"{at(m, a['ni'])}: default of `{a['name']}` dropped"


def m_add_default(m: Model, rng):
    attrs = [a for e in m.entities.values() for a in e["attrs"] if a["eq"] is None]
    if not attrs:
        return None
    a = rng.choice(attrs)
    lit = typed_literal(rng, a["type"])
    return m.replace([(a["ni"] + 1, a["ni"] + 1, f" = {lit}")]), f"{at(m, a['ni'])}: default `{a['name']} = {lit}` added"


def m_swap(m: Model, rng):
    parents = [n for n in [m.root] + m.blocks if len(n.movable_children()) >= 2]
    if not parents:
        return None
    p = rng.choice(parents)
    x, y = sorted(rng.sample(p.movable_children(), 2), key=lambda n: n.start)
    text = m.src(0, x.start) + m.src(y.start, y.end) + m.src(x.end, y.start) + m.src(x.start, x.end) + m.src(y.end, len(m.toks))
    return text, f"lines {m.line_of(x.header.sig[0])} and {m.line_of(y.header.sig[0])} swapped"


def m_delete(m: Model, rng):
    nodes = m.leaves + m.blocks
    if len(nodes) < 2:
        return None
    n = rng.choice(nodes)
    return m.replace([(n.start, n.end, "")]), f"{at(m, n.header.sig[0])}: `{m.stmt_text(n.header)}` deleted"


def m_duplicate(m: Model, rng):
    nodes = [c for c in m.root.children if c.kind in ("entity", "implementation")
             or (c.kind == "stmt" and c.header.kind in ("index", "typedef", "relation", "implement"))]
    if not nodes:
        return None
    n = rng.choice(nodes)
    pos = n.end if rng.random() < 0.5 else rng.choice(m.top_boundaries())
    chunk = m.src(n.start, n.end)
    return m.replace([(pos, pos, chunk)]), f"{at(m, n.header.sig[0])}: `{m.stmt_text(n.header)}` duplicated at line {m.line_of(pos)}"


def m_literal(m: Model, rng):
    toks = m.toks
    cands = []
    for st in m.stmts:
        if st.kind in ("relation", "index", "implement", "import", "typedef", "end", "entity", "implementation"):
            continue
        for k, i in enumerate(st.sig):
            t = toks[i]
            if t[0] in "\"'" or (t[0] in "rf" and len(t) > 1 and t[1] in "\"'") or re.fullmatch(r"-?\d*\.?\d+", t) \
                    or t in ("true", "false", "null"):
                cands.append((i, i + 1))
            elif t == "[" and k + 1 < len(st.sig) and toks[st.sig[k + 1]] == "]":
                cands.append((i, st.sig[k + 1] + 1))
    if not cands:
        return None
    i, j = rng.choice(cands)
    old = m.src(i, j)
    new = rng.choice([x for x in LITERALS if x != old])
    return m.replace([(i, j, new)]), f"{at(m, i)}: literal {old} -> {new}"


def gen_cond(m: Model, ent: str, rng) -> str:
    attrs = m.attrs_of(ent)
    opts = ["true", "false", "1", '"x"', "null", UNKNOWN_ATTR]
    for name, typ in attrs:
        base = typ.rstrip("?")
        if base == "bool":
            opts += [name, f"not {name}", f"self.{name}"]
        elif base in ("int", "number", "float"):
            opts += [f"{name} > 1", f"self.{name} == 0"]
        elif base == "string":
            opts += [f'{name} == "x"', f'{name} != ""', f'self.{name} == "h1"']
        elif base.endswith("]") or base == "list":
            opts += [f"std::len({name}) > 0", f'"a" in {name}']
        elif base == "dict":
            opts += [f'"k" in {name}']
        elif typ.startswith("rel:"):
            _, target, mult = typ.split(":", 2)
            opts += [f"{name} is defined", f"std::len({name}) > 0"]
            for n2, t2 in m.attrs_of(target):
                if t2.rstrip("?") == "string":
                    opts.append(f'{name}.{n2} == "x"')
                    break
    return rng.choice(opts)


def m_when(m: Model, rng):
    stmts = [l.header for l in m.leaves if l.header.kind == "implement"]
    if not stmts:
        return None
    st = rng.choice(stmts)
    s = [m.toks[i] for i in st.sig]
    if "using" not in s:
        return None
    ent = s[s.index("using") - 1]
    cond = gen_cond(m, ent, rng)
    last = st.sig[-1]
    if "when" in s:
        w = st.sig[s.index("when")]
        if rng.random() < 0.5:
            return m.replace([(w, last + 1, f"when {cond}")]), f"{at(m, w)}: when condition -> `{cond}`"
        op = rng.choice(["and", "or"])
        return m.replace([(last + 1, last + 1, f" {op} {cond}")]), f"{at(m, w)}: `{op} {cond}` added to the when condition"
    return m.replace([(last + 1, last + 1, f" when {cond}")]), f"{at(m, last)}: `when {cond}` added"


def m_impl_target(m: Model, rng):
    stmts = [l.header for l in m.leaves if l.header.kind == "implement"]
    if not stmts:
        return None
    st = rng.choice(stmts)
    toks = m.toks
    s = [toks[i] for i in st.sig]
    if "using" not in s:
        return None
    u = s.index("using")
    stop = s.index("when") if "when" in s else len(s)
    pool = sorted(m.impls) + ["std::none", UNKNOWN_IMPL, "parents"]
    r = rng.random()
    if r < 0.2 and u >= 2:
        i = st.sig[u - 1]
        new = rng.choice([e for e in m.entities if e != toks[i]] + [UNKNOWN_TYPE])
        return m.replace([(st.sig[1], i + 1, new)]), f"{at(m, i)}: implement entity `{s[u - 1]}` -> `{new}`"
    if r < 0.45 and stop > u + 1:
        new = rng.choice(pool)
        end = st.sig[stop - 1] + 1
        return m.replace([(end, end, f", {new}")]), f"{at(m, end)}: implement target `{new}` added"
    # replace one target (a possibly qualified name)
    targets, k = [], u + 1
    while k < stop:
        lo = k
        while k + 2 < stop and s[k + 1] == "::":
            k += 2
        targets.append((st.sig[lo], st.sig[k] + 1, "".join(s[lo:k + 1])))
        k += 2  # skip the comma
    if not targets:
        return None
    lo, hi, old = rng.choice(targets)
    new = rng.choice([p for p in pool if p != old])
    return m.replace([(lo, hi, new)]), f"{at(m, lo)}: implement target `{old}` -> `{new}`"


def m_index_attrs(m: Model, rng):
    stmts = [l.header for l in m.leaves if l.header.kind == "index"]
    toks = m.toks
    if not stmts:
        return None
    st = rng.choice(stmts)
    s = [toks[i] for i in st.sig]
    if "(" not in s or ")" not in s:
        return None
    ent = s[s.index("(") - 1]
    names = [n for n, _ in m.attrs_of(ent)] + [UNKNOWN_ATTR]
    k = rng.randint(1, min(3, len(names)))
    new = ", ".join(rng.sample(names, k))
    o, c = st.sig[s.index("(")], st.sig[len(s) - 1 - s[::-1].index(")")]
    return m.replace([(o + 1, c, new)]), f"{at(m, o)}: index attributes `{m.src(o + 1, c)}` -> `{new}`"


def insert_line(m: Model, pos: int, indent: str, line: str) -> str:
    return m.replace([(pos, pos, indent + line + "\n")])


def m_assign_twice(m: Model, rng):
    toks = m.toks
    r = rng.random()
    assigns = [l for l in m.leaves if l.header.kind == "attr-assign"]
    if assigns and r < 0.4:
        leaf = rng.choice(assigns)
        st = leaf.header
        text = m.src(st.sig[0], st.sig[-1] + 1)
        if rng.random() < 0.5:
            eq = next(i for i in st.sig if toks[i] in ("=", "+="))
            text = m.src(st.sig[0], eq + 1) + " " + rng.choice(LITERALS)
        pos = st.end if rng.random() < 0.6 else rng.choice(
            [c.start for c in leaf.parent.movable_children()] + [leaf.parent.end_stmt.start if leaf.parent.end_stmt else len(toks)])
        return insert_line(m, pos, m.indent_of(st), text), f"{at(m, st.sig[0])}: assignment repeated as `{text}` at line {m.line_of(pos)}"
    typed = [(v, e) for v, e in m.vars.items() if e]
    impls = [b for b in m.blocks if b.kind == "implementation" and b.end_stmt and m.toks[b.header.sig[3]] in m.entities]
    if typed and (r < 0.8 or not impls):
        v, e = rng.choice(typed)
        attrs = m.attrs_of(e)
        if not attrs:
            return None
        name, typ = rng.choice(attrs)
        if typ.startswith("rel:"):
            target = typ.split(":")[1]
            others = [w for w, f in m.vars.items() if f == target] or [UNKNOWN_VAR]
            val = rng.choice(others + ["null", "[]"])
        else:
            val = typed_literal(rng, typ)
        pos = rng.choice(m.top_boundaries())
        line = f"{v}.{name} = {val}"
        return insert_line(m, pos, "", line), f"line {m.line_of(pos)}: `{line}` inserted"
    if impls:
        b = rng.choice(impls)
        ent = m.toks[b.header.sig[3]]
        attrs = m.attrs_of(ent)
        if not attrs:
            return None
        name, typ = rng.choice(attrs)
        val = "null" if typ.startswith("rel:") else typed_literal(rng, typ)
        line = f"self.{name} = {val}"
        pos = b.end_stmt.start
        return insert_line(m, pos, m.child_indent(b), line), f"line {m.line_of(pos)}: `{line}` inserted in implementation"
    return None


def m_plus_assign(m: Model, rng):
    toks = m.toks
    cands = [l.header for l in m.leaves if l.header.kind in ("attr-assign", "assign")
             and any(toks[i] == "=" for i in l.header.sig)]
    if not cands:
        return None
    st = rng.choice(cands)
    if st.kind == "assign" and rng.random() < 0.7:
        return None
    eq = next(i for i in st.sig if toks[i] == "=")
    return m.replace([(eq, eq + 1, "+=")]), f"{at(m, eq)}: `=` -> `+=` in `{m.stmt_text(st)}`"


def m_insert_read(m: Model, rng):
    typed = [(v, e) for v, e in m.vars.items() if e]
    impls = [b for b in m.blocks if b.kind == "implementation" and b.end_stmt and m.toks[b.header.sig[3]] in m.entities]
    if not typed and not impls:
        return None
    in_impl = impls and (not typed or rng.random() < 0.35)
    if in_impl:
        b = rng.choice(impls)
        v, e = "self", m.toks[b.header.sig[3]]
    else:
        v, e = rng.choice(typed)
    attrs = m.attrs_of(e)
    if not attrs:
        return None
    name, typ = rng.choice(attrs)
    path = f"{v}.{name}"
    if typ.startswith("rel:"):
        target, mult = typ.split(":")[1], typ.split(":", 2)[2]
        sub = m.attrs_of(target)
        if sub and mult.replace(" ", "") in ("[1]", "[0:1]", "[1:1]") and rng.random() < 0.7:
            path += "." + rng.choice(sub)[0]
    forms = ["{p}", '"{{{{{p}}}}}"', "{p} is defined", "std::len({p})"]
    if typ.startswith("rel:") and path.count(".") == 1:
        forms = forms[2:]  # printing instances would print memory addresses
    form = rng.choice(forms)
    line = "std::print(" + form.format(p=path) + ")"
    if in_impl:
        pos = rng.choice([c.start for c in b.movable_children()] + [b.end_stmt.start])
        return insert_line(m, pos, m.child_indent(b), line), f"line {m.line_of(pos)}: `{line}` inserted in implementation"
    pos = rng.choice(m.top_boundaries())
    return insert_line(m, pos, "", line), f"line {m.line_of(pos)}: `{line}` inserted"


def m_extends(m: Model, rng):
    if not m.entities:
        return None
    e = rng.choice(sorted(m.entities))
    info = m.entities[e]
    st = info["node"].header
    s = [m.toks[i] for i in st.sig]
    colon = st.sig[-1]
    pool = [x for x in m.entities] + ["std::Entity", UNKNOWN_TYPE]
    new = rng.choice(pool)
    if "extends" in s:
        x = st.sig[s.index("extends")]
        if rng.random() < 0.4:
            return m.replace([(st.sig[1] + 1, colon, "")]), f"{at(m, x)}: `extends` of {e} removed"
        if rng.random() < 0.5:
            return m.replace([(colon, colon, f", {new}")]), f"{at(m, x)}: parent `{new}` added to {e}"
        return m.replace([(x + 1, colon, " " + new)]), f"{at(m, x)}: parents of {e} -> `{new}`"
    return m.replace([(st.sig[1] + 1, colon, f" extends {new}")]), f"{at(m, colon)}: `{e} extends {new}`"


def m_flip(m: Model, rng):
    toks = m.toks
    cands = []
    for st in m.stmts:
        if st.kind in ("relation", "index", "import", "typedef", "entity", "implementation", "end"):
            continue
        for i in st.sig:
            if toks[i] in FLIPS:
                cands.append((i, FLIPS[toks[i]]))
        if st.kind in ("if", "branch") and toks[st.sig[0]] in ("if", "elif"):
            cands.append((st.sig[0] + 1, None))
    if not cands:
        return None
    i, new = rng.choice(cands)
    if new is None:
        return m.replace([(i, i, " not")]), f"{at(m, i)}: condition negated"
    return m.replace([(i, i + 1, new)]), f"{at(m, i)}: `{toks[i]}` -> `{new}`"


def reindent(text: str, pad: str) -> str:
    return "".join(pad + l if l.strip() else l for l in text.splitlines(keepends=True))


def m_wrap(m: Model, rng):
    leaves = [c for c in m.root.children if c.kind == "stmt" and c.header.kind in ("assign", "attr-assign", "expr")]
    if not leaves:
        return None
    n = rng.choice(leaves)
    head = rng.choice(["for _w in [1, 2]:", "if true:", "if false:", "for _w in []:", "if 1 == 1:"])
    chunk = head + "\n" + reindent(m.src(n.start, n.end), "    ") + "end\n"
    return m.replace([(n.start, n.end, chunk)]), f"{at(m, n.header.sig[0])}: `{m.stmt_text(n.header)}` wrapped in `{head}`"


def m_move_into(m: Model, rng):
    leaves = [c for c in m.root.children if c.kind == "stmt" and c.header.kind in ("assign", "attr-assign", "expr")]
    blocks = [b for b in m.blocks if b.kind in ("implementation", "for", "if") and b.end_stmt]
    if not leaves or not blocks:
        return None
    n, b = rng.choice(leaves), rng.choice(blocks)
    if b.start <= n.start < b.end:
        return None
    pad = m.child_indent(b)
    pos = b.end_stmt.start
    chunk = reindent(m.src(n.start, n.end), pad)
    return m.replace([(n.start, n.end, ""), (pos, pos, chunk)]), \
        f"{at(m, n.header.sig[0])}: `{m.stmt_text(n.header)}` moved into the {b.kind} at line {m.line_of(b.header.sig[0])}"


def m_kwarg(m: Model, rng):
    calls = [c for c in m.ctor_calls() if m.toks[c[0]] in m.entities or c[3]]
    if not calls:
        return None
    ent_i, open_i, close, args = rng.choice(calls)
    ent = m.toks[ent_i]
    kws = [a for a in args if a[2]]
    r = rng.random()
    if kws and r < 0.4:
        k = rng.randrange(len(args))
        lo, hi, kw = args[k]
        # remove the argument and one adjacent comma
        if k + 1 < len(args):
            hi = args[k + 1][0]
        elif k > 0:
            lo = args[k - 1][1]
        return m.replace([(lo, hi, "")]), f"{at(m, lo)}: argument `{m.src(*args[k][:2])}` of {ent}(...) dropped"
    if kws and r < 0.6:
        lo, hi, kw = rng.choice(kws)
        new = f", {kw}={rng.choice(LITERALS) if rng.random() < 0.5 else m.src(lo, hi).split('=', 1)[1].strip()}"
        return m.replace([(hi, hi, new)]), f"{at(m, lo)}: argument `{new[2:]}` repeated in {ent}(...)"
    attrs = m.attrs_of(ent)
    given = {a[2] for a in args}
    pool = [(n, t) for n, t in attrs if n not in given] + [(UNKNOWN_ATTR, "int")]
    name, typ = rng.choice(pool)
    if typ.startswith("rel:"):
        target = typ.split(":")[1]
        val = rng.choice([w for w, f in m.vars.items() if f == target] + ["null", "[]"])
    else:
        val = typed_literal(rng, typ)
    text = f"{name}={val}" + (", " if args else "")
    return m.replace([(open_i + 1, open_i + 1, text)]), f"{at(m, open_i)}: argument `{name}={val}` added to {ent}(...)"


def m_reflow(m: Model, rng):
    """Splits a statement over lines after an opening bracket or a comma inside brackets."""
    toks = m.toks
    cands = []
    for st in m.stmts:
        if st.kind in ("entity", "implementation", "end", "branch"):
            continue
        for i in st.sig[:-1]:
            if toks[i] in ("(", "[", "{") or (toks[i] == "," and m.depth[i] > 0):
                cands.append((st, i))
    if not cands:
        return None
    st, i = rng.choice(cands)
    pad = m.indent_of(st) + "    "
    j = i + 1
    while j < len(toks) and toks[j] != "\n" and toks[j].isspace():
        j += 1
    if j < len(toks) and toks[j] in ("\n", ")", "]", "}") or toks[j].startswith("#"):
        return None
    return m.replace([(i + 1, j, "\n" + pad)]), f"{at(m, i)}: `{m.stmt_text(st)}` split after `{toks[i]}`"


def m_interp(m: Model, rng):
    """Renames a variable or attribute inside a string interpolation `{{a.b}}` or an f-string
    field `{a.b}`."""
    toks = m.toks
    cands = []
    for st in m.stmts:
        for i in st.sig:
            t = toks[i]
            if t.startswith('"') and "{{" in t:
                for mt in re.finditer(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*\}\}", t):
                    cands.append((i, mt.start(1), mt.end(1), mt.group(1)))
            elif t.startswith('f"'):
                for mt in re.finditer(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)", t):
                    cands.append((i, mt.start(1), mt.end(1), mt.group(1)))
    if not cands:
        return None
    i, lo, hi, path = rng.choice(cands)
    parts = path.split(".")
    k = rng.randrange(len(parts))
    if k == 0:
        pool = sorted(set(m.vars) | m.loopvars | {"self"}) + [UNKNOWN_VAR]
    else:
        pool = m.all_attr_names() + [UNKNOWN_ATTR]
    pool = [p for p in pool if p != parts[k]]
    if rng.random() < 0.25 and len(parts) > 1:
        parts = parts[:-1]
    elif pool:
        parts[k] = rng.choice(pool)
    new = ".".join(parts)
    if new == path:
        return None
    t = toks[i]
    return m.replace([(i, i + 1, t[:lo] + new + t[hi:])]), f"{at(m, i)}: interpolated `{path}` -> `{new}`"


def m_lookup(m: Model, rng):
    """Inserts an index lookup `E[k=v, ...]` (printed, or assigned to a fresh variable)."""
    toks = m.toks
    idx = [l.header for l in m.leaves if l.header.kind == "index"]
    if not idx:
        return None
    st = rng.choice(idx)
    s = [toks[i] for i in st.sig]
    if "(" not in s:
        return None
    ent = s[s.index("(") - 1]
    keys = [t for t in s[s.index("(") + 1:] if is_name(t)]
    types = dict(m.attrs_of(ent))
    if rng.random() < 0.2:
        keys = keys[:-1] if len(keys) > 1 else keys + [UNKNOWN_ATTR]
    args = []
    for k in keys:
        typ = types.get(k, "int")
        if typ.startswith("rel:"):
            target = typ.split(":")[1]
            val = rng.choice([w for w, f in m.vars.items() if f == target] + ["null"])
        else:
            # a value some constructor gives, when there is one
            seen = [m.src(a[0], a[1]).split("=", 1)[1].strip() for c in m.ctor_calls()
                    if toks[c[0]] == ent for a in c[3] if a[2] == k]
            val = rng.choice(seen) if seen and rng.random() < 0.7 else typed_literal(rng, typ)
        args.append(f"{k}={val}")
    attrs = [n for n, t in m.attrs_of(ent) if not t.startswith("rel:")]
    look = f"{ent}[{', '.join(args)}]"
    line = f"std::print({look}.{rng.choice(attrs)})" if attrs and rng.random() < 0.7 else f"found_{m.line_of(st.sig[0])} = {look}"
    pos = rng.choice(m.top_boundaries())
    return insert_line(m, pos, "", line), f"line {m.line_of(pos)}: `{line}` inserted"


def m_dup_stmt(m: Model, rng):
    """Repeats a statement (constructor call, assignment, loop, ...) right after itself or
    elsewhere in its block."""
    leaves = [l for l in m.leaves if l.header.kind in ("assign", "attr-assign", "expr")]
    if not leaves:
        return None
    n = rng.choice(leaves)
    chunk = m.src(n.start, n.end)
    pos = n.end if rng.random() < 0.5 else rng.choice(
        [c.start for c in n.parent.movable_children()] + [n.parent.end_stmt.start if n.parent.end_stmt else len(m.toks)])
    return m.replace([(pos, pos, chunk)]), f"{at(m, n.header.sig[0])}: `{m.stmt_text(n.header)}` repeated at line {m.line_of(pos)}"


MUTATIONS = {
    "rename-use": (m_rename_use, 8), "rename-def": (m_rename_def, 4), "attr-type": (m_attr_type, 6),
    "multiplicity": (m_multiplicity, 6), "relation-end": (m_relation_end, 3), "drop-default": (m_drop_default, 4),
    "add-default": (m_add_default, 3), "swap": (m_swap, 6), "delete": (m_delete, 5), "duplicate": (m_duplicate, 4),
    "literal": (m_literal, 7), "when": (m_when, 5), "impl-target": (m_impl_target, 4),
    "index-attrs": (m_index_attrs, 4), "assign-twice": (m_assign_twice, 6), "plus-assign": (m_plus_assign, 3),
    "insert-read": (m_insert_read, 7), "extends": (m_extends, 3), "flip": (m_flip, 4), "wrap": (m_wrap, 4),
    "move-into": (m_move_into, 3), "kwarg": (m_kwarg, 6), "reflow": (m_reflow, 3), "interp": (m_interp, 4),
    "lookup": (m_lookup, 3), "dup-stmt": (m_dup_stmt, 4),
}


# --------------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------------


def sources() -> list[Path]:
    """The conformance cases (directories); a case with libs/ is copied along with them."""
    out = []
    for main in sorted((ROOT / "tests" / "conformance").glob("*/*/main.cf")):
        case = main.parent
        if (case / "project.yml").exists():
            continue  # the oracle would use its project.yml; keep to the corpus layout
        out.append(case)
    return out


def mutate(text: str, rng: random.Random, names: list[str], max_mut: int):
    """Applies 1..max_mut mutations; returns (text, [descriptions])."""
    n = rng.choices(range(1, max_mut + 1), weights=[5, 3, 2, 1, 1][:max_mut])[0]
    done = []
    weights = [MUTATIONS[x][1] for x in names]
    for _ in range(n):
        try:
            m = Model(text)
        except AssertionError:
            break
        for _try in range(30):
            name = rng.choices(names, weights=weights)[0]
            res = MUTATIONS[name][0](m, rng)
            if res is not None and res[0] != m.text:
                text = res[0]
                done.append(f"{name}: {res[1]}")
                break
    return text, done


def generate(seed: int, count: int, names: list[str], max_mut: int):
    """[(source case, mutant text, descriptions)] for cases 0..count-1 of a seed."""
    cases = sources()
    originals = {(c / "main.cf").read_text(encoding="utf-8") for c in cases}
    seen = set(originals)
    out = []
    for i in range(count):
        for attempt in range(50):
            rng = random.Random(f"mutate-fuzz:{seed}:{i}:{attempt}")
            src = rng.choice(cases)
            text, done = mutate((src / "main.cf").read_text(encoding="utf-8"), rng, names, max_mut)
            if done and text not in seen:
                break
        seen.add(text)
        out.append((src, text, done))
    return out


def write_case(case: Path, src: Path, text: str, done: list[str]):
    if case.exists():
        shutil.rmtree(case)
    shutil.copytree(src, case, ignore=shutil.ignore_patterns("expect.json", "main.cf", ".cfcache", "__pycache__"))
    (case / "main.cf").write_text(text, encoding="utf-8")
    rel = src.relative_to(ROOT)
    (case / "mutation.txt").write_text(f"source: {rel}/main.cf\n" + "".join(d + "\n" for d in done), encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Running and comparing
# --------------------------------------------------------------------------------------------


def run_oracle(oracle: str, venv: str, cases: list[Path], jobs: int) -> str:
    env = dict(os.environ, INMANTA_REF_VENV=venv)
    cp = subprocess.run([sys.executable, oracle, "--jobs", str(jobs), "--timeout", "90", "--quiet"]
                        + [str(c) for c in cases], env=env, capture_output=True, text=True)
    return cp.stdout + cp.stderr


def problems_of(actual: dict, elapsed: float) -> list[str]:
    """weft problems independent of the reference: crash, odd exit status, slowness, diagnostics
    without a location."""
    probs = []
    rc, err = actual.get("rc"), actual.get("stderr", "")
    if actual.get("timeout"):
        probs.append("timeout (killed after 30 s)")
    elif elapsed > 10:
        probs.append(f"slow: {elapsed:.1f} s")
    if "panicked at" in err or "RUST_BACKTRACE" in err:
        line = next((l for l in err.splitlines() if "panicked at" in l), "panic")
        probs.append("panic: " + line.strip()[:300])
    if rc is not None and rc not in (0, 1):
        probs.append(f"exit status {rc}")
    n_err = 0
    for line in err.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            if line and rc is not None and not line.startswith("weft:"):
                probs.append("non-JSON stderr line: " + line[:200])
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            probs.append("unparsable diagnostic: " + line[:200])
            continue
        if d.get("severity") == "error":
            n_err += 1
        missing = [k for k in ("file", "line", "column") if d.get(k) in (None, "", 0)]
        if missing:
            probs.append(f"diagnostic without {'/'.join(missing)}: {d.get('kind')}: {str(d.get('message'))[:150]}")
    if rc == 1 and n_err == 0:
        probs.append("exit status 1 without an error diagnostic")
    if rc == 0 and n_err:
        probs.append("exit status 0 with an error diagnostic")
    return probs


def check_case(case: Path, weft: str) -> dict:
    exp_file = case / "expect.json"
    res = {"case": str(case), "expect": None, "weft": None, "diff": None, "problems": [], "group": None}
    mt = case / "mutation.txt"
    res["mutation"] = mt.read_text().splitlines() if mt.exists() else []
    t0 = time.monotonic()
    actual = EVAL.run_weft(weft, case, timeout=30)
    elapsed = time.monotonic() - t0
    res["elapsed"] = round(elapsed, 3)
    res["weft"] = EVAL.describe_actual(actual)
    res["problems"] = problems_of(actual, elapsed)
    if not exp_file.exists():
        res["diff"] = None
        res["expect"] = "no expect.json (reference failure)"
        return res
    expect = json.loads(exp_file.read_text())
    res["expect"] = EVAL.describe_expect(expect)
    if expect["status"] == "error" and expect["error"].get("line") is None:
        res["problems"] = [p + " (the reference gives no location either)" if p.startswith("diagnostic without")
                           else p for p in res["problems"]]
    diff = EVAL.mismatch(expect, actual)
    res["diff"] = diff
    if diff:
        ref = "ok" if expect["status"] == "ok" else expect["error"]["kind"]
        res["group"] = f"{EVAL.signature(expect, actual)}|ref={ref}"
        src = next((l[len("source: "):] for l in res["mutation"] if l.startswith("source: ")), "")
        known = known_divergences()
        for name in known:
            if src == f"tests/conformance/{name}/main.cf":
                res["group"] += "|known divergence of the source: " + name
    return res


def known_divergences() -> set[str]:
    """The cases of tests/conformance/known-divergences.tsv (a mutant of one of them may keep
    the known divergence)."""
    path = ROOT / "tests" / "conformance" / "known-divergences.tsv"
    if not path.exists():
        return set()
    return {l.split("\t")[0] for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")}


def report(results: list[dict]) -> int:
    n_diff = n_prob = n_missing = 0
    groups: dict[str, list[dict]] = {}
    for r in results:
        if r["expect"] and r["expect"].startswith("no expect"):
            n_missing += 1
        if r["diff"]:
            n_diff += 1
            groups.setdefault(r["group"], []).append(r)
            print(f"DISAGREE {r['case']}\n   reference: {r['expect']}\n   weft:      {r['weft']}\n   {r['diff'][:400]}")
            for line in r["mutation"]:
                print("   | " + line)
        if r["problems"]:
            n_prob += 1
            print(f"PROBLEM {r['case']}: " + "; ".join(r["problems"]))
            for line in r["mutation"]:
                print("   | " + line)
    if groups:
        print("\nDISAGREEMENTS BY KIND (what|reference status|weft outcome|reference kind):")
        for g, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            rs = sorted(rs, key=lambda r: len(Path(r["case"], "main.cf").read_text()))
            print(f"  {len(rs):4d}  {g}   e.g. " + ", ".join(Path(r['case']).name for r in rs[:6]))
    ref_err = sum(1 for r in results if r["expect"] and r["expect"].startswith("error"))
    ref_parse = sum(1 for r in results if r["expect"] and r["expect"].startswith("error ParserException"))
    print(f"SUMMARY cases={len(results)} reference_ok={len(results) - ref_err - n_missing} reference_error={ref_err} "
          f"(parse errors {ref_parse}) no_reference={n_missing} disagreements={n_diff} weft_problems={n_prob}")
    return 1 if n_diff or n_prob else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="1", help="comma-separated seeds")
    ap.add_argument("--seed", type=int, help="with --show")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--count", type=int, default=50, help="mutants per seed")
    ap.add_argument("--out", type=Path, default=Path("/tmp/mutfuzz"))
    ap.add_argument("--weft", default=str(ROOT / "target" / "release" / "weft"))
    ap.add_argument("--jobs", type=int, default=1, help="parallel reference jobs")
    ap.add_argument("--oracle", default="/work/shared/tools/oracle.py")
    ap.add_argument("--venv", default=os.environ.get("INMANTA_REF_VENV")
                    or os.path.expanduser("~/.cache/inmanta-ref/venv"))
    ap.add_argument("--max-mutations", type=int, default=3)
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--only", default="", help="mutations to use: " + ", ".join(MUTATIONS))
    ap.add_argument("--check", nargs="*", type=Path)
    ap.add_argument("--show", action="store_true")
    args = ap.parse_args()
    names = [x for x in args.only.split(",") if x] or list(MUTATIONS)
    unknown = set(names) - set(MUTATIONS)
    if unknown:
        ap.error(f"unknown mutations: {sorted(unknown)}")
    max_mut = max(1, min(5, args.max_mutations))

    if args.show:
        seed = args.seed if args.seed is not None else int(args.seeds.split(",")[0])
        src, text, done = generate(seed, args.index + 1, names, max_mut)[args.index]
        print(text, end="")
        print(f"source: {src.relative_to(ROOT)}/main.cf\n" + "\n".join(done), file=sys.stderr)
        return 0

    if args.check is not None:
        return report([check_case(c.resolve(), args.weft) for c in args.check])

    status = 0
    for seed in [int(s) for s in args.seeds.split(",") if s]:
        cases = []
        for i, (src, text, done) in enumerate(generate(seed, args.count, names, max_mut)):
            case = args.out / "gen" / f"{seed}_{i}"
            if args.no_oracle and (case / "main.cf").exists():
                if (case / "main.cf").read_text(encoding="utf-8") != text:
                    print(f"warning: {case} differs from what seed {seed} generates now; kept as it is")
            else:
                write_case(case, src, text, done)
            cases.append(case)
        if not args.no_oracle:
            print(f"seed {seed}: running the oracle on {len(cases)} mutants ...", flush=True)
            log = run_oracle(args.oracle, args.venv, cases, args.jobs)
            for line in log.splitlines():
                if "FAILURE" in line or "CRASH" in line or line.startswith("   "):
                    print("oracle: " + line)
        results = [check_case(c, args.weft) for c in cases]
        (args.out / "results").mkdir(parents=True, exist_ok=True)
        (args.out / "results" / f"{seed}.json").write_text(json.dumps(results, indent=1) + "\n")
        print(f"--- seed {seed}")
        status |= report(results)
    return status


if __name__ == "__main__":
    sys.exit(main())
