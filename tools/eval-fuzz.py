#!/usr/bin/env python3
"""Random-model differential tester for the evaluator: weft against the reference compiler.

Generates small random Inmanta models that stress evaluation order and freezing (entities with
typed attributes and defaults, inheritance, relations of every multiplicity, implementations with
`when` conditions, out-of-order statements, gradual loops, indexes and lookups, list
comprehensions, interpolation, std plugins, and at a low rate erroneous shapes), runs the
reference (`oracle.py`) and weft on each, and reports the models where they disagree.

Usage:
  eval-fuzz.py --seed S --count N --out DIR [--weft PATH] [--jobs 2] [--oracle PATH]
               [--venv DIR] [--no-oracle] [--avoid FEATURE,...]
      generate N models (deterministic from S) as DIR/gen/case_<S>_<i>/main.cf, run the
      oracle on them (writes expect.json), run weft on each and print every disagreement
      (case path, reference outcome, weft outcome) followed by a summary line.
      A case whose model got an error injected on purpose has an injected.txt naming it.
      --no-oracle   reuse the expect.json files already present (e.g. to re-check a new weft)
      --avoid       switch generator features off (see FEATURES), so that a known
                    disagreement does not hide new ones; the other features keep their
                    random choices
  eval-fuzz.py --check CASE_DIR [...] [--weft PATH]
      compare weft with an existing expect.json (no generation, no oracle run).
  eval-fuzz.py --show --seed S --index I [--avoid ...]
      print the model that --seed S would generate as case I, without running anything.
  eval-fuzz.py --reduce CASE_DIR --out DIR [--jobs 2]
      shrink a disagreeing case (greedy removal of top-level items and of statements inside
      blocks, a reference run per candidate) while it disagrees in the same way; writes
      DIR/main.cf. Finish by hand: the reducer does not edit inside a statement.

The reference venv comes from --venv, else $INMANTA_REF_VENV, else /tmp/refstd-venv.
Comparison rule (as tests/tests/conformance.rs `mismatch`): the status must match; for ok,
the sorted prints must be equal; for an error, weft's error kind must equal the reference's
kind and, when the reference gives a line, the line too (ZeroDivisionError and
ModuleNotFoundError only need an error); a first cause weft reports must equal the reference's
first cause.

Only the Python standard library is used.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# --------------------------------------------------------------------------------------------
# Model description
# --------------------------------------------------------------------------------------------

INT, STR, BOOL, STRS, INTS, DICT, OPTSTR = "int", "string", "bool", "string[]", "int[]", "dict", "string?"

# attribute name pools per type (names never clash with relations, variables or loop variables)
ATTR_NAMES = {
    INT: ["size", "weight", "prio"],
    STR: ["label", "kind", "path"],
    BOOL: ["flag", "enabled"],
    STRS: ["tags", "aliases"],
    INTS: ["nums"],
    DICT: ["meta"],
    OPTSTR: ["note"],
}
TYPE_NAMES = ["Host", "Service", "Item", "Box", "Disk", "Zone", "Rack", "Node", "Group", "User"]
SUB_NAMES = ["Special", "Big", "Extra", "Web"]
REL_NAMES = ["kids", "items", "parts", "links", "deps", "owner", "parent", "home", "peer",
             "target", "members", "slots", "zone", "master", "backup", "origin", "extras"]
DICT_KEYS = {"a": INT, "b": STR}  # every dict value has this schema


@dataclass
class Attr:
    name: str
    typ: str
    default: str | None = None  # DSL text of the default, or None
    mode: str = "open"  # "open": ctor/late/default; "impl": set by the type's implementations


@dataclass
class EType:
    name: str
    pos: int
    parent: "EType | None" = None
    own_attrs: list = field(default_factory=list)
    default_overrides: dict = field(default_factory=dict)  # attr name -> default text
    indexed: bool = False
    uses_parents: bool = False
    impls: list = field(default_factory=list)  # Impl objects declared `for` this type
    implements: list = field(default_factory=list)  # (impl names list, condition text or None)

    def ancestors(self):
        t, out = self, []
        while t is not None:
            out.append(t)
            t = t.parent
        return out

    def is_a(self, other: "EType") -> bool:
        return other in self.ancestors()

    def attrs(self) -> list:
        """All attributes (own first, then inherited), with the defaults this type sees."""
        seen, out = set(), []
        for t in self.ancestors():
            for a in t.own_attrs:
                if a.name in seen:
                    continue
                seen.add(a.name)
                d = a.default
                for u in self.ancestors():
                    if a.name in u.default_overrides:
                        d = u.default_overrides[a.name]
                        break
                    if u is t:
                        break
                out.append(Attr(a.name, a.typ, d, a.mode))
        return out

    def attr(self, name):
        for a in self.attrs():
            if a.name == name:
                return a
        return None

    def required_attrs(self) -> list:
        """The attributes a constructor must give besides `name`: open ones without a default."""
        return [a for a in self.attrs() if a.default is None and a.mode == "open" and a.name != "name"]

    def root_indexed(self) -> bool:
        return any(t.indexed for t in self.ancestors())


@dataclass
class Rel:
    rid: int
    src: EType
    name: str
    tgt: EType
    rev: str | None
    bounded: bool
    src_single: bool  # the src end (attribute `name` on src) holds at most one value
    tgt_single: bool  # the tgt end (attribute `rev` on tgt) holds at most one value
    mult_src: str = "[0:]"
    mult_tgt: str = "[0:]"


@dataclass
class Inst:
    name: str
    etype: EType
    var: str | None = None
    top: bool = True
    maybe: bool = False


@dataclass
class Creation:
    """An instance creation inside an implementation body (per instance running it) or at top
    level (for one instance, `owner`). `side` "src": the creator is the relation's source;
    "rev": the child's reverse kwarg points at the creator (creator is source); "child": the
    child is the source and its kwarg points at the creator (creator is target)."""
    rel: Rel
    side: str
    ctype: EType
    count: int
    code: str  # name suffix code
    maybe: bool


@dataclass
class Impl:
    name: str
    etype: EType
    cond: str | None  # the `when` condition, None for unconditional
    body: list = field(default_factory=list)  # statements (lists of lines)
    creations: list = field(default_factory=list)


@dataclass
class Src:
    """An expression usable as a value: its text, its type, the dependency nodes it reads and
    whether it is a plain variable reference (usable inside `{{ }}`)."""
    text: str
    typ: str
    deps: frozenset = frozenset()
    ref: bool = False


# multiplicity candidates for list ends: (text, lower, upper or None)
LIST_MULTS = [("[0:]", 0, None), ("[1:]", 1, None), ("[2:]", 2, None), ("[1:2]", 1, 2), ("[2:3]", 2, 3),
              ("[0:2]", 0, 2), ("[1:3]", 1, 3), ("[:4]", 0, 4)]


# generator features that --avoid can switch off
FEATURES = {
    "dup-loops": "for loops over plain lists with repeated items",
    "null-dups": "repeated `null` literals in those lists (a known divergence: each `null` literal is its own object in 18.0.1)",
    "scenarios": "self-contained mini-models (implicit inverse, diamond, block order, ...)",
    "comprehension-order": "list comprehensions assigned to relations (gradually)",
    "layout": "statements spread over two lines (at an operator, a bracket or a comma)",
}


def q(s: str) -> str:
    return '"' + s + '"'


def indent(lines, n=1):
    return ["    " * n + line for line in lines]


# --------------------------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------------------------


class ModelGen:
    def __init__(self, rng: random.Random, avoid=frozenset()):
        self.r = rng
        self.avoid = set(avoid)  # generator features switched off (see FEATURES)
        self.types: list[EType] = []
        self.rels: list[Rel] = []
        self.insts: list[Inst] = []  # top-level instances
        self.all_insts: list[Inst] = []  # after simulation
        self.top: list[list[str]] = []  # top-level statements
        self.pool: list[Src] = []  # early top-level values
        self.graph: dict = {}  # dependency node -> set of nodes it needs
        self.top_edges: list = []  # (rel, src inst, tgt inst)
        self.top_creations: list = []  # (inst, Creation)
        self.degrees: dict = {}  # (rid, "src"/"tgt", inst name) -> count
        self.names_used: set = set()
        self.var_counter = 0
        self.code_counter = 0
        self.rel_names = list(REL_NAMES)
        self.r.shuffle(self.rel_names)
        self.error_kind = None
        self.scenario_defs: list[str] = []  # definitions of self-contained scenarios
        # chaos: allow dependency cycles through relations and more relation-driven conditions
        # (shapes whose outcome depends on the freeze heuristics, often a failure)
        self.chaos = self.r.random() < 0.3

    # ---------------------------------------------------------------- helpers
    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def pick(self, seq):
        return self.r.choice(seq)

    def new_var(self, prefix="v"):
        self.var_counter += 1
        return f"{prefix}{self.var_counter}"

    def new_code(self):
        self.code_counter += 1
        return f"c{self.code_counter}"

    def add_dep(self, node, deps):
        self.graph.setdefault(node, set()).update(deps)

    def reaches(self, start_nodes, target) -> bool:
        """Whether target is reachable from start_nodes in the dependency graph (adding an edge
        target -> start_nodes would close a cycle). In chaos mode cycles are often allowed."""
        if self.chaos and self.chance(0.6):
            return False
        return self.walk_finds(start_nodes, lambda n: n == target)

    def walk_finds(self, start_nodes, found) -> bool:
        """Whether a walk of the dependency graph from start_nodes meets a node `found` accepts."""
        seen, stack = set(), list(start_nodes)
        while stack:
            n = stack.pop()
            if found(n):
                return True
            if n in seen:
                continue
            seen.add(n)
            stack.extend(self.graph.get(n, ()))
        return False

    def subtypes(self, t: EType) -> list:
        return [u for u in self.types if u.is_a(t)]

    def runners(self, impl: Impl) -> list:
        """Concrete types whose instances run `impl`."""
        out = []
        for t in self.types:
            u = t
            while u is not None:
                if impl.etype is u:
                    out.append(t)
                    break
                if not u.uses_parents:
                    break
                u = u.parent
        return out

    def creates_graph_ok(self, makers: list, child: EType) -> bool:
        """Adding `maker creates child` edges must keep the type-creation graph acyclic."""
        edges = dict(self.create_edges)
        for m in makers:
            edges.setdefault(m.name, set()).add(child.name)
        seen, stack = set(), [child.name]
        while stack:
            n = stack.pop()
            if any(m.name == n for m in makers):
                return False
            if n in seen:
                continue
            seen.add(n)
            stack.extend(edges.get(n, ()))
        return True

    def add_create_edges(self, makers, child):
        for m in makers:
            self.create_edges.setdefault(m.name, set()).add(child.name)

    # ---------------------------------------------------------------- types and attributes
    def gen_types(self):
        names = self.r.sample(TYPE_NAMES, self.r.randint(2, 4))
        for n in names:
            t = EType(n, len(self.types))
            t.own_attrs.append(Attr("name", STR))
            self.gen_attrs(t, self.r.randint(1, 3))
            t.indexed = self.chance(0.45)
            self.types.append(t)
        if self.chance(0.45):
            self.gen_subtype()
        self.create_edges = {}

    def gen_attrs(self, t: EType, n: int, inherited=()):
        used = {a.name for a in inherited} | {a.name for a in t.own_attrs}
        weights = [(INT, 4), (STR, 3), (BOOL, 2), (STRS, 1), (INTS, 1), (DICT, 1), (OPTSTR, 1)]
        for _ in range(n):
            typ = self.r.choices([w[0] for w in weights], [w[1] for w in weights])[0]
            cands = [x for x in ATTR_NAMES[typ] if x not in used]
            if not cands:
                continue
            name = self.pick(cands)
            used.add(name)
            a = Attr(name, typ)
            if self.chance(0.4):
                a.default = self.const(typ)
            t.own_attrs.append(a)

    def gen_subtype(self):
        base = self.pick(self.types)
        name = self.pick(SUB_NAMES) + base.name
        sub = EType(name, len(self.types), parent=base)
        self.gen_attrs(sub, self.r.randint(0, 1), inherited=base.attrs())
        # redefine the default of an inherited attribute (same type)
        cands = [a for a in base.attrs() if a.name != "name" and a.typ in (INT, STR, BOOL)]
        if cands and self.chance(0.5):
            a = self.pick(cands)
            sub.default_overrides[a.name] = self.const(a.typ)
        sub.uses_parents = self.chance(0.65)
        self.types.append(sub)

    def const(self, typ: str) -> str:
        r = self.r
        if typ == INT:
            return str(r.randint(0, 12))
        if typ == STR:
            return q(r.choice(["a", "b", "web", "db", "x-1", "", "Zed", "low", "ab"]))
        if typ == BOOL:
            return r.choice(["true", "false"])
        if typ == STRS:
            pool = ["p", "q", "web", "qq", "web"]
            items = [r.choice(pool) for _ in range(r.randint(0, 3))]
            if "dup-loops" in self.avoid:
                items = list(dict.fromkeys(items))
            return "[" + ", ".join(q(x) for x in items) + "]"
        if typ == INTS:
            return "[" + ", ".join(str(r.randint(0, 5)) for _ in range(r.randint(0, 3))) + "]"
        if typ == DICT:
            return '{"a": %d, "b": %s}' % (r.randint(0, 9), q(r.choice(["u", "v", "w"])))
        if typ == OPTSTR:
            return r.choice(["null", q("n1"), q("opt")])
        raise ValueError(typ)

    # ---------------------------------------------------------------- relations
    def gen_relations(self):
        n = self.r.randint(1, 4)
        roots = self.types
        for _ in range(n):
            src, tgt = self.pick(roots), self.pick(roots)
            if not self.rel_names:
                break
            name = self.rel_names.pop()
            rev = None
            if self.chance(0.6) and self.rel_names and src is not tgt:
                rev = self.rel_names.pop()
            bounded = self.chance(0.65)
            rel = Rel(len(self.rels), src, name, tgt, rev, bounded,
                      src_single=bounded and self.chance(0.45),
                      tgt_single=bounded and rev is not None and self.chance(0.5))
            self.rels.append(rel)

    def rels_from(self, t: EType):
        """(rel, end) pairs where instances of t hold the end: end "src" = attribute rel.name."""
        out = []
        for rel in self.rels:
            if t.is_a(rel.src):
                out.append((rel, "src"))
            if rel.rev is not None and t.is_a(rel.tgt):
                out.append((rel, "tgt"))
        return out

    # ---------------------------------------------------------------- implementations
    def gen_impl_skeletons(self):
        """Decides per type: the main unconditional implementation, conditional pairs and extras,
        and which attributes are set by implementations."""
        for t in self.types:
            main = Impl(f"impl_{t.name.lower()}", t, None)
            t.impls.append(main)
            # attributes set by implementations (own attrs without default)
            for a in t.own_attrs:
                if a.name != "name" and a.default is None and a.typ in (INT, STR, BOOL, STRS) \
                        and self.chance(0.25) and not self.overridden_below(t, a.name):
                    a.mode = "impl"
            # complementary pair of conditional implementations
            if self.chance(0.4):
                cond = self.impl_condition(t)
                if cond is not None:
                    c_text, c_deps = cond
                    yes = Impl(f"{t.name.lower()}_yes", t, c_text)
                    no = Impl(f"{t.name.lower()}_no", t, f"not ({c_text})")
                    t.impls += [yes, no]
                    t.pair = (yes, no, c_deps)
            # an extra conditional implementation that may or may not run
            if self.chance(0.3):
                cond = self.impl_condition(t)
                if cond is not None:
                    t.impls.append(Impl(f"{t.name.lower()}_extra", t, cond[0]))
                    t.extra_deps = cond[1]
        for t in self.types:
            self.fill_impl_attrs(t)
        for t in self.types:  # a subtype needs its parents' implementations for their attributes
            if t.parent is not None and any(a.mode == "impl" for a in t.parent.attrs()):
                t.uses_parents = True

    def overridden_below(self, t, name):
        return any(u is not t and u.is_a(t) and name in u.default_overrides for u in self.types)

    def impl_condition(self, t: EType):
        """A boolean `when` condition over the instance's early attributes."""
        srcs = self.self_sources(t, early_only=True)
        if not srcs:
            return None
        text, deps = self.bool_expr(srcs, 2)
        if self.chance(0.5):
            text = text.replace("self.", "")  # bare attribute names resolve to the instance
        return text, deps

    def self_sources(self, t: EType, early_only=False, prefix="self."):
        out = []
        for a in t.attrs():
            if a.mode == "impl":
                continue
            out.append(Src(prefix + a.name, a.typ, frozenset(), True))
            if a.typ == DICT:
                out.append(Src(f'{prefix}{a.name}["a"]', INT))
                out.append(Src(f'{prefix}{a.name}["b"]', STR))
        return out

    def fill_impl_attrs(self, t: EType):
        """Every `impl` attribute of t gets set exactly once per instance: in the main impl, in
        both branches of an if/else, or in both implementations of a conditional pair."""
        main = t.impls[0]
        srcs = self.self_sources(t)
        for a in t.own_attrs:
            if a.mode != "impl":
                continue
            pair = getattr(t, "pair", None)
            how = self.r.choice(["main", "ifelse", "pair"] if pair else ["main", "ifelse"])
            node = ("iattr", t.name, a.name)
            rel_read = None
            if a.typ == INT and self.chance(0.35):
                rel_read = self.self_rel_count(t)
            if a.typ == STRS and self.chance(0.6):
                rel_read = self.self_rel_names(t)
            if how == "main":
                if rel_read:
                    v, d = rel_read
                else:
                    v, d = self.expr(a.typ, srcs, 2)
                main.body.append([f"self.{a.name} = {v}"])
                self.add_dep(node, d)
            elif how == "ifelse":
                c, cd = self.bool_expr(srcs, 2)
                v1, d1 = rel_read if rel_read else self.expr(a.typ, srcs, 2)
                v2, d2 = self.expr(a.typ, srcs, 1)
                main.body.append([f"if {c}:", f"    self.{a.name} = {v1}", "else:",
                                  f"    self.{a.name} = {v2}", "end"])
                self.add_dep(node, cd | d1 | d2)
            else:
                yes, no, cd = pair
                v1, d1 = self.expr(a.typ, srcs, 2)
                v2, d2 = self.expr(a.typ, srcs, 1)
                yes.body.append([f"self.{a.name} = {v1}"])
                no.body.append([f"self.{a.name} = {v2}"])
                self.add_dep(node, cd | d1 | d2)

    def pick_list_end(self, t: EType):
        """A multi-valued relation end of t, picked at random: its attribute name and the
        dependency node of its relation; None when t has none."""
        ends = [(rel, end) for rel, end in self.rels_from(t) if not self.end_single(rel, end)]
        if not ends:
            return None
        rel, end = self.pick(ends)
        return (rel.name if end == "src" else rel.rev), frozenset({("rel", rel.rid)})

    def self_rel_count(self, t: EType):
        picked = self.pick_list_end(t)
        if picked is None:
            return None
        attr, dep = picked
        return f"std::count(self.{attr})", dep

    def self_rel_names(self, t: EType):
        picked = self.pick_list_end(t)
        if picked is None:
            return None
        attr, dep = picked
        if self.chance(0.3):
            return f'std::select(self.{attr}, "name")', dep
        return f"[c.name for c in self.{attr}]", dep

    @staticmethod
    def end_single(rel, end):
        return rel.src_single if end == "src" else rel.tgt_single

    # ---------------------------------------------------------------- expressions
    def conditional(self, typ: str, srcs: list, depth: int):
        """`(c ? a : b)` with operands of type typ, each at most depth deep."""
        c, cd = self.bool_expr(srcs, depth)
        a, ad = self.expr(typ, srcs, depth)
        b, bd = self.expr(typ, srcs, depth)
        return f"({c} ? {a} : {b})", cd | ad | bd

    def expr(self, typ: str, srcs: list, depth: int):
        """Returns (text, deps) of an expression of type typ built from srcs and constants."""
        r = self.r
        same = [s for s in srcs if s.typ == typ]
        if typ == BOOL:
            return self.bool_expr(srcs, depth)
        if depth <= 0 or r.random() < 0.3:
            if same and r.random() < 0.7:
                s = r.choice(same)
                return s.text, s.deps
            return self.const(typ), frozenset()
        if typ == INT:
            k = r.randint(0, 5)
            if k == 0 and same:
                a, ad = self.expr(INT, srcs, depth - 1)
                b, bd = self.expr(INT, srcs, depth - 1)
                return f"{a} + {b}", ad | bd
            if k == 1 and same:
                a, ad = self.expr(INT, srcs, depth - 1)
                return f"{a} * {r.randint(2, 3)}", ad
            lists = [s for s in srcs if s.typ in (STRS, INTS)]
            if k == 2 and lists:
                s = r.choice(lists)
                return f"std::len({s.text})", s.deps
            strs = [s for s in srcs if s.typ == STR]
            if k == 3 and strs:
                s = r.choice(strs)
                return f"std::length({s.text})", s.deps
            if k == 4:
                return self.conditional(INT, srcs, depth - 1)
            if same:
                a, ad = self.expr(INT, srcs, depth - 1)
                return f"{a} - {r.randint(1, 3)}", ad
            return self.const(INT), frozenset()
        if typ == STR:
            k = r.randint(0, 5)
            refs = [s for s in srcs if s.ref and s.typ in (INT, STR, BOOL, OPTSTR)]
            if k == 0 and refs:
                parts = r.sample(refs, min(len(refs), r.randint(1, 2)))
                txt = "-".join("{{" + p.text + "}}" for p in parts)
                return q("x" + txt if r.random() < 0.5 else txt), frozenset().union(*[p.deps for p in parts])
            if k == 1 and refs:
                parts = r.sample(refs, min(len(refs), r.randint(1, 2)))
                txt = ":".join("{" + p.text + "}" for p in parts)
                return "f" + q(txt), frozenset().union(*[p.deps for p in parts])
            if k == 2 and same:
                a, ad = self.expr(STR, srcs, depth - 1)
                b, bd = self.expr(STR, srcs, depth - 1)
                return f"{a} + {b}", ad | bd
            if k == 3 and same:
                a, ad = self.expr(STR, srcs, depth - 1)
                f = r.choice(["upper", "lower", "capitalize"])
                if r.random() < 0.3:
                    return f'std::replace({a}, "a", "o")', ad
                return f"std::{f}({a})", ad
            if k == 4:
                return self.conditional(STR, srcs, depth - 1)
            if same:
                s = r.choice(same)
                return s.text, s.deps
            return self.const(STR), frozenset()
        if typ == STRS:
            strs = [s for s in srcs if s.typ == STR]
            if strs and r.random() < 0.6:
                items = [self.expr(STR, srcs, depth - 1) for _ in range(r.randint(1, 3))]
                return "[" + ", ".join(i[0] for i in items) + "]", frozenset().union(*[i[1] for i in items])
            return self.const(STRS), frozenset()
        if typ == INTS:
            if r.random() < 0.3:
                return f"[i * 2 for i in std::sequence({r.randint(0, 3)})]", frozenset()
            return self.const(INTS), frozenset()
        if typ == DICT:
            ints = [s for s in srcs if s.typ == INT]
            if ints and r.random() < 0.4:
                a, ad = self.expr(INT, srcs, depth - 1)
                return '{"a": %s, "b": "k"}' % a, ad
            return self.const(DICT), frozenset()
        if typ == OPTSTR:
            if r.random() < 0.4:
                return "null", frozenset()
            return self.expr(STR, srcs, depth)
        raise ValueError(typ)

    def bool_expr(self, srcs: list, depth: int):
        r = self.r
        k = r.randint(0, 8)
        ints = [s for s in srcs if s.typ == INT]
        strs = [s for s in srcs if s.typ == STR]
        bools = [s for s in srcs if s.typ == BOOL]
        lists = [s for s in srcs if s.typ in (STRS, INTS)]
        if k <= 2 and ints:
            a, ad = self.expr(INT, srcs, depth - 1)
            op = r.choice([">", "<", "==", ">=", "!=", "<="])
            return f"{a} {op} {r.randint(0, 8)}", ad
        if k == 3 and strs:
            a, ad = self.expr(STR, srcs, depth - 1)
            return f"{a} {r.choice(['==', '!='])} {self.const(STR)}", ad
        if k == 4 and bools:
            s = r.choice(bools)
            return s.text, s.deps
        if k == 5 and depth > 0:
            a, ad = self.bool_expr(srcs, depth - 1)
            b, bd = self.bool_expr(srcs, depth - 1)
            return f"{a} {r.choice(['and', 'or'])} {b}", ad | bd
        if k == 6 and depth > 0:
            a, ad = self.bool_expr(srcs, depth - 1)
            return f"not ({a})", ad
        if k == 7 and lists:
            s = r.choice(lists)
            item = q(r.choice("pqrs")) if s.typ == STRS else str(r.randint(0, 5))
            return f"{item} {r.choice(['in', 'not in'])} {s.text}", s.deps
        if bools:
            s = r.choice(bools)
            return s.text, s.deps
        if ints:
            s = r.choice(ints)
            return f"{s.text} > {r.randint(0, 6)}", s.deps
        return r.choice(["true", "false"]), frozenset()

    # ---------------------------------------------------------------- top-level instances
    def gen_instances(self):
        concrete = list(self.types)
        n = self.r.randint(2, 5)
        counters = {}
        for _ in range(n):
            t = self.pick(concrete)
            counters[t.name] = counters.get(t.name, 0) + 1
            name = f"{t.name[0].lower()}{t.name[1].lower()}{counters[t.name]}"
            inst = Inst(name, t, var=name)
            self.insts.append(inst)
            self.names_used.add(name)
        if self.chance(0.3):
            self.gen_const_vars()
        for inst in self.insts:
            self.gen_instance(inst)

    def gen_const_vars(self):
        for _ in range(self.r.randint(1, 2)):
            v = self.new_var("k")
            typ = self.pick([INT, STR, BOOL])
            txt, deps = self.expr(typ, self.pool, 1)
            self.top.append([f"{v} = {txt}"])
            self.pool.append(Src(v, typ, deps, True))
            self.const_vars = getattr(self, "const_vars", []) + [Src(v, typ, frozenset(), True)]

    def gen_instance(self, inst: Inst):
        """Constructor (or anonymous constructor + lookup), with attribute values from the early
        pool; some required attributes are assigned later by a separate statement."""
        t = inst.etype
        kwargs, late = [], []
        for a in t.attrs():
            if a.mode == "impl":
                continue
            if a.name == "name":
                kwargs.append(f"name={q(inst.name)}")
                continue
            if a.default is not None and self.chance(0.5):
                continue  # keep the default
            v, _ = self.expr(a.typ, self.pool, 2)
            if a.default is None and self.chance(0.25):
                late.append(f"{inst.var}.{a.name} = {v}")
            else:
                kwargs.append(f"{a.name}={v}")
        inst.kwargs = kwargs
        inst.late = late
        inst.lookup = t.root_indexed() and self.chance(0.3)
        for a in t.attrs():
            node_deps = frozenset()
            if a.mode == "impl":
                node_deps = frozenset({("iattr", self.impl_owner(t, a.name), a.name)})
                if self.iattr_reads_rel(node_deps):
                    continue  # reads a relation: only for late values
            self.pool.append(Src(f"{inst.var}.{a.name}", a.typ, node_deps, True))
            if a.typ == DICT:
                self.pool.append(Src(f'{inst.var}.{a.name}["a"]', INT, node_deps))
                self.pool.append(Src(f'std::json_dumps({inst.var}.{a.name})', STR, node_deps))
                self.pool.append(Src(f'std::dict_keys({inst.var}.{a.name})', STRS, node_deps))

    def iattr_reads_rel(self, nodes):
        return self.walk_finds(nodes, lambda n: n[0] == "rel")

    def impl_owner(self, t: EType, attr: str) -> str:
        for u in t.ancestors():
            if any(a.name == attr for a in u.own_attrs):
                return u.name
        return t.name

    def constructor_text(self, inst: Inst, extra_kwargs=()):
        args = list(inst.kwargs) + list(extra_kwargs)
        self.r.shuffle(args)
        return f"{inst.etype.name}({', '.join(args)})"

    # ---------------------------------------------------------------- bounded relations
    def gen_bounded_fills(self):
        self.ctor_extra = {i.name: [] for i in self.insts}
        for rel in self.rels:
            if rel.bounded:
                mech = self.r.random()
                if mech < 0.5:
                    self.fill_top_edges(rel)
                elif mech < 0.85:
                    self.fill_impl_creation(rel, maybe=False) or self.fill_top_edges(rel)
                else:
                    self.fill_seq_creation(rel) or self.fill_top_edges(rel)
                if not rel.src_single and self.chance(0.3):
                    self.fill_top_edges(rel)
            else:
                if self.chance(0.5):
                    self.fill_impl_creation(rel, maybe=True)
                if self.chance(0.3):
                    self.fill_seq_creation(rel)

    def insts_of(self, t: EType):
        return [i for i in self.insts if i.etype.is_a(t)]

    def fill_top_edges(self, rel: Rel):
        srcs, tgts = self.insts_of(rel.src), self.insts_of(rel.tgt)
        if not srcs or not tgts:
            return False
        deg_s = {i.name: self.top_degree(rel, "src", i) for i in srcs}
        deg_t = {i.name: self.top_degree(rel, "tgt", i) for i in tgts}
        if rel.src_single and self.impl_fills(rel):
            return False
        edges = []
        for s in srcs:
            if self.chance(0.25):
                continue
            k = 1 if rel.src_single else self.r.randint(1, 3)
            if rel.src_single and deg_s[s.name] >= 1:
                continue
            for t in self.r.sample(tgts, min(k, len(tgts))):
                if rel.tgt_single and deg_t[t.name] >= 1:
                    continue
                if rel.src is rel.tgt and s is t and rel.rev is not None:
                    continue
                edges.append((s, t))
                deg_s[s.name] += 1
                deg_t[t.name] += 1
        self.render_top_edges(rel, edges)
        return True

    def top_degree(self, rel, end, inst):
        n = 0
        for r2, s, t in self.top_edges:
            if r2 is rel and ((end == "src" and s is inst) or (end == "tgt" and t is inst)):
                n += 1
        return n

    def impl_fills(self, rel):
        return any(c.rel is rel for t in self.types for im in t.impls for c in im.creations)

    def render_top_edges(self, rel: Rel, edges):
        """Each edge is written through one (sometimes two) of: the source's constructor, the
        target's constructor (reverse end), an assignment on either end, or an index lookup."""
        by_src = {}
        for s, t in edges:
            self.top_edges.append((rel, s, t))
            by_src.setdefault(s.name, (s, []))[1].append(t)
        for s, ts in by_src.values():
            ways = ["src_ctor", "src_assign", "per_edge"]
            if rel.rev is not None:
                ways += ["tgt_ctor", "tgt_assign"]
            way = self.pick(ways)
            refs = [self.inst_ref(t) for t in ts]
            if way == "src_ctor" or (way == "src_assign"):
                val = refs[0] if len(refs) == 1 and self.chance(0.6) else "[" + ", ".join(refs) + "]"
                if rel.src_single:
                    val = refs[0]
                if way == "src_ctor" and not any(k.startswith(rel.name + "=") for k in self.ctor_extra[s.name]):
                    self.ctor_extra[s.name].append(f"{rel.name}={val}")
                else:  # an assignment (also when the constructor already has this keyword)
                    op = "=" if rel.src_single or self.chance(0.5) else "+="
                    self.top.append([f"{s.var}.{rel.name} {op} {val}"])
            elif way == "per_edge":
                for ref in refs:
                    op = "=" if rel.src_single or self.chance(0.4) else "+="
                    self.top.append([f"{s.var}.{rel.name} {op} {ref}"])
            else:
                for t in ts:
                    sref = self.inst_ref(s)
                    if not rel.tgt_single and self.chance(0.3):
                        sref = f"[{sref}]"
                    if way == "tgt_ctor" and not any(k.startswith(rel.rev + "=") for k in self.ctor_extra[t.name]):
                        self.ctor_extra[t.name].append(f"{rel.rev}={sref}")
                    else:  # an assignment (also when the constructor already has this keyword)
                        op = "=" if rel.tgt_single or self.chance(0.5) else "+="
                        self.top.append([f"{t.var}.{rel.rev} {op} {sref}"])
            # sometimes write the same edge a second time from the other side (double binding)
            if rel.rev is not None and self.chance(0.15):
                t = ts[0]
                op = "=" if rel.tgt_single else self.pick(["=", "+="])
                self.top.append([f"{t.var}.{rel.rev} {op} {s.var}"])

    def inst_ref(self, inst: Inst) -> str:
        if inst.etype.root_indexed() and self.chance(0.25):
            return f'{self.index_owner(inst.etype).name}[name={q(inst.name)}]'
        return inst.var

    def index_owner(self, t: EType) -> EType:
        """Look up through the type itself or an indexed ancestor."""
        cands = [u for u in t.ancestors() if u.indexed]
        if t.indexed or not cands:
            return t if t.root_indexed() else t
        return self.pick(cands)

    def child_types(self, base: EType):
        return [u for u in self.types if u.is_a(base)]

    def child_kwargs(self, ctype: EType, code: str, name_text: str, srcs):
        args = [f"name={name_text}"]
        for a in ctype.attrs():
            if a.name == "name" or a.mode == "impl":
                continue
            if a.default is not None and self.chance(0.6):
                continue
            v, _ = self.expr(a.typ, srcs, 1)
            args.append(f"{a.name}={v}")
        return args

    def fill_impl_creation(self, rel: Rel, maybe: bool):
        """In an implementation of one end's type, create instances of the other end's type."""
        options = []
        for ct in self.child_types(rel.tgt):
            options.append(("src", rel.src, ct))
            if rel.rev is not None:
                options.append(("rev", rel.src, ct))
        for ct in self.child_types(rel.src):
            options.append(("child", rel.tgt, ct))
        self.r.shuffle(options)
        for side, maker, ctype in options:
            if side == "src" and rel.src_single and any(
                    r2 is rel for r2, _, _ in self.top_edges):
                continue
            impls = [im for im in maker.impls if (im.cond is None) != maybe]
            if not impls:
                continue
            impl = self.pick(impls)
            makers = self.runners(impl)
            if not self.creates_graph_ok(makers, ctype):
                continue
            if side == "src" and rel.src_single and self.impl_fills(rel):
                continue
            if side == "child" and rel.tgt_single and self.impl_fills(rel):
                continue
            # the creator's end receives `count` values per instance
            single_here = rel.src_single if side in ("src", "rev") else rel.tgt_single
            count = 1 if single_here else self.r.randint(1, 2)
            self.add_create_edges(makers, ctype)
            c = Creation(rel, side, ctype, count, self.new_code(), maybe)
            impl.creations.append(c)
            impl.body.append(self.creation_lines(c, "self", impl.etype))
            if maybe:
                self.add_dep(("rel", rel.rid), getattr(impl.etype, "pair", (None, None, frozenset()))[2]
                             | getattr(impl.etype, "extra_deps", frozenset()))
            return True
        return False

    def creation_lines(self, c: Creation, owner: str, owner_type: EType | None, owner_name=None):
        """Statements creating c.count instances of c.ctype linked to `owner`."""
        rel = c.rel
        srcs = self.self_sources(owner_type) if owner_type is not None and owner == "self" else []
        use_seq = c.count > 1 and self.chance(0.5)
        if owner == "self":
            base = "{{self.name}}-" + c.code
        else:
            base = owner_name + "-" + c.code
        names = [q(base + "{{i}}")] if use_seq else [q(base + str(k)) for k in range(c.count)]
        ctors = []
        for nm in names:
            kw = self.child_kwargs(c.ctype, c.code, nm, srcs)
            if c.side == "rev":
                kw.append(f"{rel.rev}={owner}")
            if c.side == "child":
                kw.append(f"{rel.name}={owner}")
            self.r.shuffle(kw)
            ctors.append(f"{c.ctype.name}({', '.join(kw)})")
        single = rel.src_single
        if c.side == "src":
            if use_seq:
                op = "=" if single else self.pick(["=", "+="])
                return [f"for i in std::sequence({c.count}):", f"    {owner}.{rel.name} {op} {ctors[0]}", "end"]
            if len(ctors) > 1 and self.chance(0.5):
                return [f"{owner}.{rel.name} = [{', '.join(ctors)}]"]
            lines = []
            for ct in ctors:
                op = "=" if single else self.pick(["=", "+="])
                if self.chance(0.25) and owner == "self":
                    v = self.new_var("x")
                    lines += [f"{v} = {ct}", f"{owner}.{rel.name} {op} {v}"]
                else:
                    lines.append(f"{owner}.{rel.name} {op} {ct}")
            return lines
        if use_seq:
            return [f"for i in std::sequence({c.count}):", f"    {ctors[0]}", "end"]
        return list(ctors)

    def fill_seq_creation(self, rel: Rel):
        """Top-level statements (a `for i in std::sequence(k)` or one constructor per child)
        creating children of one top-level instance."""
        srcs = self.insts_of(rel.src)
        if not srcs or rel.src_single:
            return False
        owner = self.pick(srcs)
        cts = self.child_types(rel.tgt)
        ctype = self.pick(cts)
        if any(c.rel is rel for _, c in self.top_creations) and rel.src_single:
            return False
        side = "rev" if rel.rev is not None and self.chance(0.4) else "src"
        c = Creation(rel, side, ctype, self.r.randint(1, 3), self.new_code(), False)
        if c.count == 1:
            c.count = 2
        self.top_creations.append((owner, c))
        lines = self.creation_lines(c, owner.var, None, owner_name=owner.name)
        if lines[0].startswith("for"):
            self.top.append(lines)
        else:
            self.top += [[line] for line in lines]
        return True

    # ---------------------------------------------------------------- simulation
    def simulate(self):
        """Enumerates every instance (top-level and created by implementations, assuming every
        conditional creation happens) and counts the values of each relation end."""
        deg = {}

        all_insts = list(self.insts)
        queue = list(self.insts)
        edges = set()
        for rel, s, t in self.top_edges:
            edges.add((rel.rid, s.name, t.name))
        for owner, c in self.top_creations:
            for k in range(c.count):
                child = Inst(f"{owner.name}-{c.code}{k}", c.ctype, top=False)
                all_insts.append(child)
                queue.append(child)
                edges.add((c.rel.rid, owner.name, child.name))
        seen = 0
        while queue:
            x = queue.pop(0)
            seen += 1
            if seen > 400:
                raise RuntimeError("runaway creation")
            for impl in self.impls_running(x.etype):
                for c in impl.creations:
                    for k in range(c.count):
                        child = Inst(f"{x.name}-{c.code}{k}", c.ctype, top=False, maybe=c.maybe or x.maybe)
                        all_insts.append(child)
                        queue.append(child)
                        if c.side in ("src", "rev"):
                            edges.add((c.rel.rid, x.name, child.name))
                        else:
                            edges.add((c.rel.rid, child.name, x.name))
        for rid, s, t in edges:
            key_s, key_t = (rid, "src", s), (rid, "tgt", t)
            deg[key_s] = deg.get(key_s, 0) + 1
            deg[key_t] = deg.get(key_t, 0) + 1
        self.all_insts = all_insts
        self.degrees = deg
        self.edges = edges
        for rel in self.rels:
            self.choose_mults(rel)

    def impls_running(self, t: EType):
        out, u = [], t
        while u is not None:
            out += u.impls
            if not u.uses_parents:
                break
            u = u.parent
        return out

    def choose_mults(self, rel: Rel):
        def rng_of(end, typ):
            ds = [self.degrees.get((rel.rid, end, i.name), 0) for i in self.all_insts if i.etype.is_a(typ)]
            return (min(ds), max(ds)) if ds else (0, 0)

        rel.mult_src = self.pick_mult(rel.src_single, *rng_of("src", rel.src), rel.bounded)
        if rel.rev is not None:
            rel.mult_tgt = self.pick_mult(rel.tgt_single, *rng_of("tgt", rel.tgt), rel.bounded)

    def pick_mult(self, single: bool, lo: int, hi: int, bounded: bool) -> str:
        if single:
            assert hi <= 1, (lo, hi)
            return "[1]" if lo == 1 and self.chance(0.8) else "[0:1]"
        if not bounded:
            return "[0:]"
        cands = [m for m, a, b in LIST_MULTS if a <= lo and (b is None or hi <= b)]
        tight = [m for m, a, b in LIST_MULTS if m in cands and a == lo and lo > 0]
        if tight and self.chance(0.6):
            return self.pick(tight)
        return self.pick(cands)

    # ---------------------------------------------------------------- reads and prints (late)
    def rel_sources_top(self):
        """Relation reads on top-level instances, with their dependency nodes."""
        out = []
        for inst in self.insts:
            for rel, end in self.rels_from(inst.etype):
                attr = rel.name if end == "src" else rel.rev
                other = rel.tgt if end == "src" else rel.src
                single = self.end_single(rel, end)
                d = self.degrees.get((rel.rid, end, inst.name), 0)
                out.append((f"{inst.var}.{attr}", rel, end, other, single, d))
        return out

    def late_sources(self):
        """Top-level values, including relation reads (which wait for freezing)."""
        srcs = list(self.pool)
        for inst in self.insts:  # implementation-set attributes
            for a in inst.etype.attrs():
                if a.mode == "impl":
                    node = ("iattr", self.impl_owner(inst.etype, a.name), a.name)
                    srcs.append(Src(f"{inst.var}.{a.name}", a.typ, frozenset({node}), True))
        for text, rel, end, other, single, d in self.rel_sources_top():
            dep = frozenset({("rel", rel.rid)})
            if single:
                srcs.append(Src(f"{text} is defined", BOOL, dep))
                if d == 1:
                    for a in other.attrs():
                        if a.typ in (INT, STR, BOOL) and a.mode == "open":
                            srcs.append(Src(f"{text}.{a.name}", a.typ, dep, True))
            else:
                srcs.append(Src(f"std::count({text})", INT, dep))
                srcs.append(Src(f"[x.name for x in {text}]", STRS, dep))
                srcs.append(Src(f"{text} is defined", BOOL, dep))
                if self.chance(0.3):
                    srcs.append(Src(f'std::select({text}, "name")', STRS, dep))
                if self.chance(0.3):
                    srcs.append(Src(f'[x.name for x in std::key_sort({text}, "name")]', STRS, dep))
                for r2, e2 in self.rels_from(other):  # nested comprehension through a second relation
                    if not self.end_single(r2, e2) and self.chance(0.5):
                        a2 = r2.name if e2 == "src" else r2.rev
                        d2 = dep | {("rel", r2.rid)}
                        srcs.append(Src(f'[x.name + "/" + y.name for x in {text} for y in x.{a2}]', STRS, d2))
                conds = [a for a in other.attrs() if a.typ in (INT, BOOL) and a.mode == "open"]
                if conds:
                    a = self.pick(conds)
                    c = f"x.{a.name}" if a.typ == BOOL else f"x.{a.name} > {self.r.randint(0, 5)}"
                    srcs.append(Src(f"[x.name for x in {text} if {c}]", STRS, dep))
        return srcs

    def gen_prints_top(self, n):
        srcs = self.late_sources()
        for _ in range(n):
            typ = self.pick([INT, STR, BOOL, STRS, STRS, INT, STR])
            if typ == STRS:
                lists = [s for s in srcs if s.typ == STRS]
                if lists:
                    s = self.pick(lists)
                    self.top.append([f"std::print({s.text})"])
                    continue
            txt, deps = self.expr(typ, srcs, 2)
            if self.chance(0.3):
                v = self.new_var("v")
                self.top.append([f"{v} = {txt}"])
                self.top.append([f'std::print("{v}={{{{{v}}}}}")'])
            else:
                self.top.append([f"std::print({txt})"])

    def gen_float_print(self):
        ints = [s for s in self.pool if s.typ == INT]
        if ints:
            s = self.pick(ints)
            self.top.append([f"std::print({s.text} / {self.r.choice([2, 4, 5])})"])

    def gen_list_loops(self):
        """`for` over plain lists (list attributes, list variables, list literals) whose items
        may repeat: the 18.0.1 loop skips an item it has seen before (by object identity)."""
        lists = [x for x in self.pool if x.typ in (STRS, INTS) and x.ref]
        r = self.r
        if lists and self.chance(0.6):
            src = self.pick(lists).text
        else:
            items = [self.pick([q("web"), q("p"), "1000", "7", "null", "true", q("ab"), "1.5"])
                     for _ in range(r.randint(2, 5))]
            items += r.sample(items, r.randint(1, len(items)))
            # Values that are, or are not, the object of a string read twice: CPython returns a
            # string itself from a format of it alone, `+ ""`, a replace that finds nothing, a
            # slice of all of it; a dict variable is one object, two literals are two.
            strs = [x for x in self.pool if x.typ == STR and x.ref]
            if strs and self.chance(0.35):
                s = self.pick(strs).text
                forms = [s, f'f"{{{s}}}"', f'{s} + ""', f'std::replace({s}, "zz", "y")',
                         f'std::limit({s}, 50)', f'std::format("{{}}", {s})', f'std::upper({s})']
                items += [self.pick(forms) for _ in range(r.randint(2, 4))]
            if self.chance(0.2):
                d = self.new_var("dv")
                self.top.append([f'{d} = {{"k": {r.randint(0, 9)}}}'])
                items += [d, d, self.pick([d, '{"k": 1}'])]
            if "null-dups" in self.avoid and items.count("null") > 1:
                first = items.index("null")
                items = [x for i, x in enumerate(items) if x != "null" or i == first]
            src = "[" + ", ".join(items) + "]"
            if self.chance(0.4):
                v = self.new_var("lv")
                self.top.append([f"{v} = {src}"])
                src = v
        w = self.new_var("w")
        self.top.append([f"for {w} in {src}:", f'    std::print("{w} {{{{{w}}}}}")', "end"])

    def gen_top_loops(self):
        """`for` over relations of top-level instances: print, or copy into a free relation
        (gradual), possibly through an if/elif/else on attributes of the element."""
        reads = [x for x in self.rel_sources_top() if not x[4]]
        if not reads:
            return
        text, rel, end, other, single, d = self.pick(reads)
        esrcs = self.self_sources(other, prefix="x.")
        body = []
        frees = [(r2, i) for r2 in self.rels if not r2.bounded for i in self.insts
                 if i.etype.is_a(r2.src) and other.is_a(r2.tgt)]
        if frees and self.chance(0.5):
            r2, dst = self.pick(frees)
            if not self.reaches({("rel", rel.rid)}, ("rel", r2.rid)) and r2 is not rel:
                self.add_dep(("rel", r2.rid), {("rel", rel.rid)})
                body.append(f"{dst.var}.{r2.name} += x")
        c, _ = self.bool_expr(esrcs, 1)
        p1, _ = self.expr(STR, esrcs, 2)
        body += [f"if {c}:", f"    std::print({p1})"]
        if self.chance(0.5):
            c2, _ = self.bool_expr(esrcs, 1)
            body += [f"elif {c2}:", f'    std::print("mid {{{{x.name}}}}")']
        body += ["else:", f'    std::print("{text}: {{{{x.name}}}}")', "end"]
        self.top.append([f"for x in {text}:"] + indent(body) + ["end"])

    def gen_free_fills(self):
        """Conditional or gradual writes into free ([0:] -- [0:]) relations between top-level
        instances, guarded against dependency cycles."""
        frees = [r for r in self.rels if not r.bounded]
        for rel in frees:
            srcs_i, tgts_i = self.insts_of(rel.src), self.insts_of(rel.tgt)
            if not srcs_i or not tgts_i:
                continue
            for _ in range(self.r.randint(0, 2)):
                s, t = self.pick(srcs_i), self.pick(tgts_i)
                kind = self.r.randint(0, 3)
                late = self.late_sources() if self.chance(0.8 if self.chaos else 0.4) else self.pool
                if kind <= 1:
                    c, cd = self.bool_expr(late, 2)
                    if self.reaches(cd, ("rel", rel.rid)):
                        continue
                    self.add_dep(("rel", rel.rid), cd)
                    t2 = self.pick(tgts_i)
                    lines = [f"if {c}:", f"    {s.var}.{rel.name} += {self.inst_ref(t)}"]
                    if self.chance(0.5):
                        lines += ["else:", f"    {s.var}.{rel.name} = [{t2.var}]"]
                    self.top.append(lines + ["end"])
                elif kind == 2:
                    # copy another relation's content (gradual)
                    cands = [(text, r2) for text, r2, end, other, single, d in self.rel_sources_top()
                             if not single and other.is_a(rel.tgt) and r2 is not rel]
                    if not cands:
                        continue
                    text, r2 = self.pick(cands)
                    if self.reaches({("rel", r2.rid)}, ("rel", rel.rid)):
                        continue
                    self.add_dep(("rel", rel.rid), {("rel", r2.rid)})
                    other = r2.tgt if text.endswith("." + r2.name) else r2.src
                    conds = [a for a in other.attrs() if a.typ in (INT, BOOL) and a.mode == "open"]
                    if conds and self.chance(0.5) and "comprehension-order" not in self.avoid:
                        a = self.pick(conds)
                        c = f"y.{a.name}" if a.typ == BOOL else f"y.{a.name} < {self.r.randint(1, 6)}"
                        self.top.append([f"{s.var}.{rel.name} = [y for y in {text} if {c}]"])
                    elif "comprehension-order" not in self.avoid and self.chance(0.3):
                        self.top.append([f"{s.var}.{rel.name} += [y for y in {text}]"])
                    else:
                        self.top.append([f"{s.var}.{rel.name} {self.pick(['=', '+='])} {text}"])
                else:
                    self.top.append([f"{s.var}.{rel.name} += [{t.var}, {self.pick(tgts_i).var}]"])

    def gen_lookups(self):
        """Index lookups (sometimes of instances created by implementations, by their computed
        name), with reads of their attributes."""
        cands = [i for i in self.all_insts if i.etype.root_indexed() and not i.maybe]
        if not cands:
            return
        for _ in range(self.r.randint(1, 2)):
            inst = self.pick(cands)
            v = self.new_var("l")
            owner = self.index_owner(inst.etype)
            self.top.append([f"{v} = {owner.name}[name={q(inst.name)}]"])
            attrs = [a for a in inst.etype.attrs() if a.typ in (INT, STR, BOOL, STRS)]
            if owner is not inst.etype:
                attrs = [a for a in owner.attrs() if a.typ in (INT, STR, BOOL, STRS)]
            a = self.pick(attrs)
            if self.chance(0.5):
                self.top.append([f'std::print("{v} {{{{{v}.{a.name}}}}}")'])
            else:
                self.top.append([f"std::print({v}.{a.name})"])

    def gen_impl_reads(self):
        """Prints, loops and conditionals inside implementation bodies."""
        for t in self.types:
            for impl in t.impls:
                if self.chance(0.35 if impl.cond is None else 0.6):
                    impl.body.append(self.impl_print(impl))
                if self.chance(0.35):
                    loop = self.impl_loop(impl)
                    if loop:
                        impl.body.append(loop)
                if self.chance(0.25):
                    impl.body.append(self.impl_if(impl))

    def impl_srcs(self, impl: Impl):
        t = impl.etype
        srcs = self.self_sources(t)
        for rel, end in self.rels_from(t):
            attr = rel.name if end == "src" else rel.rev
            other = rel.tgt if end == "src" else rel.src
            mult = rel.mult_src if end == "src" else rel.mult_tgt
            if mult == "[1]":
                for a in other.attrs():
                    if a.typ in (INT, STR) and a.mode == "open":
                        srcs.append(Src(f"self.{attr}.{a.name}", a.typ, frozenset(), True))
            elif mult == "[0:1]":
                srcs.append(Src(f"self.{attr} is defined", BOOL))
            else:
                srcs.append(Src(f"std::count(self.{attr})", INT))
                srcs.append(Src(f"[e.name for e in self.{attr}]", STRS))
        return srcs

    def impl_print(self, impl):
        srcs = self.impl_srcs(impl)
        typ = self.pick([STR, STR, INT, STRS, BOOL])
        if typ == STRS:
            lists = [s for s in srcs if s.typ == STRS]
            if lists:
                return [f"std::print({self.pick(lists).text})"]
            typ = STR
        txt, _ = self.expr(typ, srcs, 2)
        if typ == STR and self.chance(0.5):
            return [f'std::print("{impl.name} {{{{self.name}}}}: " + {txt})']
        return [f"std::print({txt})"]

    def impl_loop(self, impl):
        t = impl.etype
        ends = [(rel, end) for rel, end in self.rels_from(t) if not self.end_single(rel, end)]
        if not ends:
            return None
        rel, end = self.pick(ends)
        attr = rel.name if end == "src" else rel.rev
        other = rel.tgt if end == "src" else rel.src
        esrcs = self.self_sources(other, prefix="e.")
        p, _ = self.expr(STR, esrcs, 1)
        return [f"for e in self.{attr}:", f'    std::print("{{{{name}}}} {attr} " + {p})', "end"]

    def impl_if(self, impl):
        srcs = self.impl_srcs(impl)
        c1, _ = self.bool_expr(srcs, 2)
        lines = [f"if {c1}:", f'    std::print("{impl.name} A {{{{self.name}}}}")']
        if self.chance(0.5):
            c2, _ = self.bool_expr(srcs, 1)
            inner, _ = self.bool_expr(srcs, 1)
            lines += [f"elif {c2}:", f"    if {inner}:", f'        std::print("{impl.name} B1 {{{{name}}}}")',
                      "    end"]
        if self.chance(0.6):
            lines += ["else:", f'    std::print("{impl.name} C {{{{self.name}}}}")']
        return lines + ["end"]

    # ---------------------------------------------------------------- value rendering
    VALUE_TEMPLATES = [
        "std::print({i} / 4)",
        "std::print([{i} / 3, {i} * 1.5, 0 - {i}, {i} % 3, {i} % -4])",
        "std::print(2 ** {i} - 0.5)",
        "std::print([{s}, \"q'uote\", 'dq\"', {b}, null, 1.0])",
        'std::print({{"k": {i}, "l": [{s}, {b}], "n": null, "f": {i} / 8}})',
        "std::print(string({i} / 2) + string({b}) + string({i}))",
        "std::print(int({i} / 2) + int(\"07\"))",
        "std::print([1.0 == 1, true == 1, [1, 2] == [1, 2], null == null, {i} != {i} + 0.0])",
        "std::print({i} > 2 and {s} != \"x\" or not {b})",
        'std::print(std::format("<{{}}> {{:>4}} {{:.2f}}", {s}, {i}, {i} / 7))',
        "std::print(std::limit({s} + \"abcdef\", 3) + std::capitalize({s}))",
        'std::print([{s} in ["x", "a"], "k" in {{"k": 1}}, 3 not in [1, 2]])',
        "std::print(1000000 * 1000000 * {i})",
        "std::print({i} * 0.1 + 0.2)",
        "std::print(({i} + 1) / ({i} + 1))",
        'std::print(f"{{{iv}:>5}}|{{{fv}:.3f}}|{{{sv}!r}}|{{{lv}}}|{{{dv}}}")',
        'std::print("{{{{{fv}}}}} {{{{{lv}}}}} {{{{{dv}}}}} {{{{{bv}}}}} {{{{{nv}}}}}")',
        "std::print(std::len({lv}) + std::count({lv}))",
        "std::print([x * 2 for x in std::sequence({i} % 4, 1)])",
        "std::print([x for x in [{i}, 1, {i}, 2, 2] if x > 1])",
        "std::print(std::unique([{s}, {s}]))",
    ]

    def gen_value_prints(self):
        """Prints of values whose rendering is easy to get wrong: floats, negative numbers,
        quotes inside list items, dicts, booleans and null in lists and in interpolation,
        f-string format specs, casts."""
        def src(typ):
            c = [x for x in self.pool if x.typ == typ and x.ref]
            return self.pick(c).text if c and self.chance(0.7) else self.const(typ)

        names = {}
        needs_vars = False
        for _ in range(self.r.randint(1, 3)):
            t = self.pick(self.VALUE_TEMPLATES)
            if "{fv}" in t or "{lv}" in t:
                needs_vars = True
            if needs_vars and not names:
                names = {k: self.new_var(k[0] + "x") for k in ("iv", "fv", "sv", "lv", "dv", "bv", "nv")}
                self.top.append([f"{names['iv']} = {src(INT)}"])
                self.top.append([f"{names['fv']} = {src(INT)} / 3"])
                self.top.append([f"{names['sv']} = {src(STR)}"])
                self.top.append([f"{names['lv']} = [{src(INT)}, {src(STR)}, {src(BOOL)}, 2.5]"])
                self.top.append([f'{names["dv"]} = {{"a": {src(INT)}, "b": [{src(STR)}], "c": null}}'])
                self.top.append([f"{names['bv']} = {src(BOOL)}"])
                self.top.append([f"{names['nv']} = null"])
            self.top.append([t.format(i=src(INT), s=src(STR), b=src(BOOL), **names)])

    # ---------------------------------------------------------------- scenarios
    # Self-contained randomized mini-models (own entities) for semantics the main generator does
    # not reach: implicit inverse with composite indexes and selector lookups, multiple
    # inheritance defaults, self-inverse relations, **dict constructors, emission order inside
    # nested blocks, long attribute chains built out of order, `is defined` driving
    # implementations, lookups of instances created later, relation values from nested lists
    # and conditional expressions.

    def gen_scenarios(self):
        names = [n for n in dir(self) if n.startswith("scn_")]
        k = self.r.choice([0, 1, 1, 2])
        for n in self.r.sample(names, k):
            getattr(self, n)()

    def defs(self, *lines):
        self.scenario_defs += list(lines)

    def scn_implicit_inverse(self):
        r = self.r
        self.defs("entity Dir:", "    string name", "end", "entity File:", "    string path", "    int size = 0",
                  "end", "Dir.files [0:] -- File.dir [1]", "index File(dir, path)",
                  "implement File using std::none")
        body = []
        if self.chance(0.5):
            body.append('self.files += File(path="/x")')
        if self.chance(0.5):
            body.append('File(dir=self, path="/y", size=2)')
        if body:
            self.defs("implementation mkfiles for Dir:", *indent(body), "end", "implement Dir using mkfiles")
        else:
            self.defs("implement Dir using std::none")
        init = ", ".join(f'File(path="/{p}"' + (f", size={r.randint(1, 4)})" if self.chance(0.4) else ")")
                         for p in r.sample("abc", r.randint(1, 3)))
        self.top.append([f'd1 = Dir(name="d1", files=[{init}])'])
        self.top.append([f'd1.files += File(path="/{r.choice("abcd")}")'])
        if self.chance(0.5):
            self.top.append(['d2 = Dir(name="d2")', 'File(dir=d2, path="/a")'])
            self.top.append(['std::print([f.path for f in d2.files])'])
        self.top.append(["std::print([f.path for f in d1.files])"])
        p = self.pick(["/x", "/y"]) if body else "/" + self.pick("abc")
        exists = (p in ("/x", "/y") and any(p[1] in b for b in body)) or p[1] in init
        if exists or self.chance(0.15):
            v = self.new_var("f")
            form = self.pick([f'File[dir=d1, path="{p}"]', f'd1.files[path="{p}"]'])
            self.top.append([f"{v} = {form}", f'std::print("{{{{{v}.path}}}} {{{{{v}.size}}}}")'])

    def scn_diamond(self):
        r = self.r
        p1 = [("v", "int", str(r.randint(0, 5))), ("s", "string", q("p1"))]
        p2 = [("v", "int", str(r.randint(6, 9))), ("s", "string", q("p2")), ("b", "bool", "true")]
        self.defs("entity Pa:", *[f"    {t} {n} = {d}" for n, t, d in p1], "end",
                  "entity Pb:", *[f"    {t} {n} = {d}" for n, t, d in p2], "end")
        parents = ["Pa", "Pb"] if self.chance(0.5) else ["Pb", "Pa"]
        own = []
        if self.chance(0.4):
            own.append(f"    int v = {r.randint(10, 12)}")
        undef = self.chance(0.25)
        if undef:
            own.append("    string s = undef")
        self.defs(f"entity Ch extends {', '.join(parents)}:", *own, "end",
                  "implement Pa using std::none", "implement Pb using std::none")
        if self.chance(0.5):
            self.defs("implementation chimpl for Pa:", '    std::print("pa impl {{v}} {{s}}")', "end",
                      "implement Pa using chimpl", "implement Ch using parents")
        else:
            self.defs("implement Ch using std::none")
        args = ['s="given"'] if undef or self.chance(0.3) else []
        self.top.append([f"ch = Ch({', '.join(args)})"])
        self.top.append(['std::print("{{ch.v}} {{ch.s}} {{ch.b}}")'])

    def scn_self_inverse(self):
        self.defs("entity Peer:", "    string name", "end", "Peer.peer [0:1] -- Peer.peer [0:1]",
                  "implement Peer using std::none")
        self.top.append(['pa = Peer(name="pa")'])
        how = self.r.randint(0, 2)
        if how == 0:
            self.top.append(['pb = Peer(name="pb", peer=pa)'])
        elif how == 1:
            self.top.append(['pb = Peer(name="pb")', 'pa.peer = pb'])
        else:
            self.top.append(['pb = Peer(name="pb")', 'pb.peer = pa'])
            self.top.append(['pa.peer = pb'])
        self.top.append(['pc = Peer(name="pc")'])
        self.top.append(['std::print("{{pa.peer.name}} {{pb.peer.name}}")'])
        self.top.append(['std::print([pa.peer is defined, pc.peer is defined])'])

    def scn_kwargs_dict(self):
        self.defs("entity Kw:", "    string name", "    int size = 1", "    string label", "end",
                  "implement Kw using std::none")
        d = self.new_var("d")
        self.top.append([f'{d} = {{"size": {self.r.randint(2, 9)}, "label": "L"}}'])
        self.top.append([f'kw1 = Kw(name="kw1", **{d})'])
        self.top.append([f'kw2 = Kw(**{{"name": "kw2", "label": kw1.label + "2"}})'])
        self.top.append(['std::print("{{kw1.size}} {{kw1.label}} {{kw2.size}} {{kw2.label}}")'])

    def scn_block_order(self):
        """Relation order from additions in nested blocks (whose statements the reference
        emits in reverse) mixed with top-level additions."""
        r = self.r
        self.defs("entity Bag:", "    string name", "end", "entity Ball:", "    int n", "end",
                  "Bag.balls [0:] -- Ball.bag [0:1]", "implement Ball using std::none")
        counter = iter(range(1, 100))

        def stmt(depth):
            k = r.randint(0, 5 if depth < 2 else 2)
            if k <= 1:
                return [f"self.balls += Ball(n={next(counter)})"]
            if k == 2:
                return [f"Ball(n={next(counter)}, bag=self)"]
            if k == 3:
                return ["if true:"] + indent(stmt(depth + 1) + stmt(depth + 1)) + ["end"]
            if k == 4:
                a = next(counter)
                return [f"for i in std::sequence(2, {a * 10}):", "    self.balls += Ball(n=i)"] + \
                    indent(stmt(depth + 1)) + ["end"]
            return [f"self.balls += [Ball(n={next(counter)}), Ball(n={next(counter)})]"]

        body = []
        for _ in range(r.randint(2, 4)):
            body += stmt(0)
        self.defs("implementation fill for Bag:", *indent(body), "end", "implement Bag using fill")
        self.top.append(['bag = Bag(name="bag")'])
        self.top.append(["bag.balls += Ball(n=0)"])
        if self.chance(0.5):
            self.top.append(["Ball(n=90, bag=bag)"])
        self.top.append(["std::print([x.n for x in bag.balls])"])
        if self.chance(0.5):
            self.top.append(["for x in bag.balls:", '    std::print("ball {{x.n}}")', "end"])

    def scn_long_chain(self):
        r = self.r
        self.defs("entity Ln:", "    string name", "    int v", "end", "Ln.next [0:1] -- Ln.prev [0:1]",
                  "implement Ln using std::none")
        n = r.randint(3, 5)
        stmts = []
        for i in range(1, n + 1):
            if i < n:
                how = r.randint(0, 2)
                if how == 0:
                    stmts.append([f'ln{i} = Ln(name="ln{i}", v=ln{i + 1}.v + 1, next=ln{i + 1})'])
                elif how == 1:
                    stmts.append([f'ln{i} = Ln(name="ln{i}", v=ln{i + 1}.v + 1)', f"ln{i}.next = ln{i + 1}"])
                else:
                    stmts.append([f'ln{i} = Ln(name="ln{i}", v=ln{i}.next.v * 2)', f"ln{i + 1}.prev = ln{i}"])
            else:
                stmts.append([f'ln{i} = Ln(name="ln{i}", v=1)'])
        r.shuffle(stmts)
        for st in stmts:
            self.top.append(st)
        self.top.append([f'std::print("{{{{ln1.next.next.name}}}} {{{{ln1.v}}}} {{{{ln{n}.prev.prev.v}}}}")'])

    def scn_optional_impls(self):
        self.defs("entity On:", "    string name", "end", "On.o [0:1] -- On.back [0:]",
                  "implementation has_o for On:", '    std::print("{{name}} has {{o.name}}")', "end",
                  "implementation no_o for On:", '    std::print("{{name}} has none")', "end",
                  "implement On using has_o when o is defined",
                  "implement On using no_o when not (self.o is defined)")
        self.top.append(['on1 = On(name="on1")'])
        self.top.append(['on2 = On(name="on2")'])
        how = self.r.randint(0, 3)
        if how == 0:
            self.top.append(["on1.o = on2"])
        elif how == 1:
            self.top.append(["if on2.name == \"on2\":", "    on1.o = on2", "end"])
        elif how == 2:
            self.top.append(["on2.back += on1"])
        self.top.append(["std::print([x.name for x in on2.back])"])

    def scn_late_lookup(self):
        self.defs("entity Lt:", "    string name", "    int n = 0", "end", "index Lt(name)",
                  "entity Mk:", "    string name", "end",
                  "implementation mk for Mk:", '    Lt(name="{{self.name}}-made", n=std::length(self.name))', "end",
                  "implement Mk using mk", "implement Lt using std::none")
        self.top.append(['lt = Lt[name="mk1-made"]'])
        self.top.append(['std::print("late {{lt.n}}")'])
        self.top.append(['Mk(name="mk1")'])

    def scn_nested_values(self):
        """Relation values given as nested lists (flattened, deduplicated) and conditional
        expressions, read in order."""
        self.defs("entity Nv:", "    string name", "end", "Nv.others [0:] -- Nv", "implement Nv using std::none")
        self.top.append(['nv1 = Nv(name="nv1")', 'nv2 = Nv(name="nv2")', 'nv3 = Nv(name="nv3")'])
        forms = ["nv1.others = [nv2, [nv3, nv2], [nv1]]",
                 "nv1.others += (nv2.name == \"nv2\" ? [nv3, nv2] : nv1)",
                 "nv1.others += [x for x in [nv3, nv1, nv3]]",
                 "nv1.others = nv2"]
        if "comprehension-order" in self.avoid:
            forms.remove("nv1.others += [x for x in [nv3, nv1, nv3]]")
        for f in self.r.sample(forms, self.r.randint(1, len(forms))):
            self.top.append([f])
        self.top.append(["std::print([x.name for x in nv1.others])"])

    def scn_mixed_writers(self):
        """One relation written by many kinds of statements (plain, list, conditional
        expression, relation copy, loop, reverse end, comprehension, if, implementation), with
        the instances defined in random order; the printed list shows the arrival order."""
        r = self.r
        self.defs("entity Mw:", "    string name", "    int k = 0", "end",
                  "Mw.out [0:] -- Mw.inn [0:]", "Mw.src [0:] -- Mw",
                  "entity Trig:", "    string name", "end",
                  "implementation trig for Trig:", "    m1.out += m4", "    m1.src += m5", "end",
                  "implement Trig using trig", "implement Mw using std::none")
        forms = ["m1.out += m2", "m1.out += [m3, m2]", "m1.out = m4",
                 "m1.out += (m2.k > 0 ? m3 : [m4, m5])", "m1.out += m1.src",
                 "for x in m1.src:\n    m1.out += x\nend", "m5.inn += m1", "Mw(name=\"m6\", inn=m1)",
                 "if m3.k == 3:\n    m1.out += m3\nend", 'Trig(name="t")', "m1.src = [m2, m3]",
                 "m1.src += m4"]
        if "comprehension-order" not in self.avoid:
            forms += ["m1.out += [x for x in m1.src]", "m1.out += [x for x in [m5, m4]]",
                      "m1.out += [x for x in m1.src if x.k >= 0]", "m1.out += [x for x in [m2, m5] for y in [1]]"]
        stmts = [f.split("\n") for f in r.sample(forms, r.randint(3, 7))]
        stmts += [[f'm{i} = Mw(name="m{i}", k={i})'] for i in range(1, 6)]
        stmts.append(["std::print([x.name for x in m1.out])"])
        if self.chance(0.4):
            stmts.append(["for x in m1.out:", '    std::print("out {{x.name}} {{x.k}}")', "end"])
        if self.chance(0.3):
            stmts.append(["std::print([x.name for x in m1.src])"])
        r.shuffle(stmts)
        self.top += stmts

    def scn_gradual_web(self):
        """A small random web of gradual writes between instances of one entity: relation
        copies, loops feeding other relations (possibly each other), optional ends driving
        `if`s and `when`s, conditional expressions, writes from implementations; then prints of
        relation orders and counts (counts pull freezes, so some of these fail on purpose)."""
        r = self.r
        n = r.randint(3, 5)
        g = [f"g{i}" for i in range(1, n + 1)]
        self.defs("entity Gw:", "    string name", "    int k = 0", "end",
                  "Gw.a [0:] -- Gw.ra [0:]", "Gw.b [0:] -- Gw", "Gw.o [0:1] -- Gw.ro [0:]")
        impl_lines = []
        if self.chance(0.5):
            impl_lines.append(("gw_k", f"k == {r.randint(1, n)}", [f"self.b += {self.pick(g)}",
                                                                     f"self.a += self.b"]))
        if self.chance(0.5):
            impl_lines.append(("gw_o", "o is defined", ["self.o.b += self", 'std::print("o {{name}} {{o.name}}")']))
        if self.chance(0.3):
            impl_lines.append(("gw_loop", "true", ["for e in self.ra:", "    e.b += self", "end"]))
        for name, cond, body in impl_lines:
            self.defs(f"implementation {name} for Gw:", *indent(body), "end",
                      f"implement Gw using {name} when {cond}")
        self.defs("implement Gw using std::none")
        stmts = [[f'{x} = Gw(name="{x}", k={i + 1})'] for i, x in enumerate(g)]

        def two():
            return r.sample(g, 2)

        for _ in range(r.randint(4, 9)):
            x, y = two()
            z = self.pick(g)
            k = r.randint(0, 11 if "comprehension-order" in self.avoid else 13)
            if k == 0:
                st = [f"{x}.a += {y}"]
            elif k == 1:
                st = [f"{x}.a = [{y}, {z}]"]
            elif k == 2:
                st = [f"{x}.b += {y}.a"]
            elif k == 3:
                st = [f"for e in {x}.a:", f"    {y}.b += e", "end"]
            elif k == 4:
                st = [f"{y}.ra += {x}"]
            elif k == 5:
                st = [f"{x}.o = {y}"]
            elif k == 6:
                st = [f"if {x}.o is defined:", f"    {y}.a += {z}", "else:", f"    {y}.b += {z}", "end"]
            elif k == 7:
                st = [f"{x}.a += ({y}.k > {r.randint(0, 4)} ? {z} : [{y}, {x}])"]
            elif k == 8:
                st = [f"if {x}.k > {r.randint(0, 4)}:", f"    {y}.b += {x}", f"    {y}.a += {z}", "end"]
            elif k == 9:
                st = [f"for e in {x}.b:", f"    for f in e.a:", f"        {y}.b += f", "    end", "end"]
            elif k == 10:
                st = [f"Gw(name=\"{x}-n\", ra={x}, o={y})"]
            elif k == 11:
                st = [f"{x}.b = {y}.b"]
            elif k == 12:
                st = [f"{x}.a += [e for e in {y}.b if e.k > {r.randint(0, 3)}]"]
            else:
                st = [f"{x}.b += [e for e in {y}.a]"]
            stmts.append(st)
        for _ in range(r.randint(2, 4)):
            x = self.pick(g)
            k = r.randint(0, 4)
            if k <= 1:
                stmts.append([f"std::print([e.name for e in {x}.{self.pick(['a', 'b'])}])"])
            elif k == 2:
                stmts.append([f"for e in {x}.b:", f'    std::print("{x}.b has {{{{e.name}}}}")', "end"])
            elif k == 3:
                stmts.append([f"std::print({x}.o is defined)"])
            else:
                stmts.append([f"std::print(std::count({x}.{self.pick(['a', 'b', 'ra'])}))"])
        r.shuffle(stmts)
        self.top += stmts

    def scn_comprehensions(self):
        a = self.r.sample(["x", "y", "zz", "x"], 3)
        self.top.append([f'std::print([p + q for p in {json.dumps(a)} for q in ["1", "2"] if p != "y" or q == "1"])'])
        self.top.append(["std::print([n * m for n in std::sequence(3) for m in [n, 10] if n > 0 if m != 1])"])

    def scn_typedefs(self):
        """Typedef constraints (expression, `in` list, start-anchored regex) on attributes,
        list attributes of a typedef, and values that sometimes violate them."""
        r = self.r
        self.defs("typedef small as int matching self < 100 and self >= 0",
                  "typedef word as string matching /[a-z]+/",
                  "typedef pick as string matching self in [\"a\", \"bb\"]",
                  "entity Td:", "    small n = 5", "    word w = \"abc\"", "    pick p = \"a\"",
                  "    small[] ns = [1, 2]", "    word? ow = null", "end", "implement Td using std::none")
        good = {"n": ["0", "99", "7"], "w": ['"ab1"', '"x"', '"a-b"'], "p": ['"bb"', '"a"'],
                "ns": ["[]", "[3, 4, 3]"], "ow": ['"zz"', "null"]}
        bad = {"n": ["100", "-1", "true"], "w": ['"1ab"', '"Ab"', '""'], "p": ['"c"', '"A"'],
               "ns": ["[1, 200]"], "ow": ['"9"']}
        args = []
        for k in r.sample(list(good), r.randint(1, 4)):
            vals = bad[k] if self.chance(0.12) else good[k]
            args.append(f"{k}={self.pick(vals)}")
        self.top.append([f"td = Td({', '.join(args)})"])
        self.top.append(['std::print("{{td.n}} {{td.w}} {{td.p}} {{td.ns}} {{td.ow}}")'])

    def scn_numbers(self):
        """int attributes that accept booleans, float attributes, number comparisons and
        interpolation of floats with integral values."""
        r = self.r
        self.defs("entity Nb:", "    int i = 0", "    float f = 1.5", "    int[] li = []", "end",
                  "implement Nb using std::none")
        i = self.pick(["true", "3", "false", "-2"])
        f = self.pick(["2.0", "0.1", "-0.5", "1e3" if self.chance(0.05) else "3.25"])
        self.top.append([f"nb = Nb(i={i}, f={f}, li=[true, 2, {i}])"])
        self.top.append(['std::print("{{nb.i}} {{nb.f}} {{nb.li}}")'])
        self.top.append(["std::print([nb.i + 1, nb.f * 2, nb.f == 2, nb.i == 1, nb.f / 0.5])"])
        self.top.append(['std::print(f"{nb.f:.1f} {nb.i!r} {nb.f}")'])

    # ---------------------------------------------------------------- implementation writes
    def multi_ends(self, t: EType, mults_known=True):
        """(rel, end, attribute, other type, kind) for ends of t: kind "multi" or "one" ([1])."""
        out = []
        for rel, end in self.rels_from(t):
            attr = rel.name if end == "src" else rel.rev
            other = rel.tgt if end == "src" else rel.src
            mult = rel.mult_src if end == "src" else rel.mult_tgt
            if not self.end_single(rel, end):
                out.append((rel, end, attr, other, "multi"))
            elif mult == "[1]":
                out.append((rel, end, attr, other, "one"))
            else:
                out.append((rel, end, attr, other, "opt"))
        return out

    def impl_write(self, impl: Impl, cond_deps=frozenset()):
        """One statement of impl writing into a free relation: a copy of another relation of the
        instance (gradual), a filtered comprehension, a conditional expression, or `self` added to
        a relation of the instance its [1] end points at. None if nothing fits."""
        t = impl.etype
        ends = self.multi_ends(t)
        opts = []
        for rel, end, attr, other, kind in ends:
            if rel.bounded or kind != "multi":
                continue
            for r2, e2, a2, o2, k2 in ends:
                if r2 is rel or k2 == "opt" or not o2.is_a(other):
                    continue
                opts.append(("copy", rel, attr, r2, a2, o2, k2))
        for r2, e2, a2, o2, k2 in ends:  # self.P.F += self
            if k2 != "one":
                continue
            for rel, end, attr, other, kind in self.multi_ends(o2):
                if not rel.bounded and kind == "multi" and t.is_a(other):
                    opts.append(("up", rel, attr, r2, a2, o2, k2))
        if not opts:
            return None
        how, rel, attr, r2, a2, o2, k2 = self.pick(opts)
        deps = {("rel", r2.rid)} | set(cond_deps)
        if self.reaches(deps, ("rel", rel.rid)) or (how == "up" and rel is r2):
            return None
        self.add_dep(("rel", rel.rid), deps)
        if how == "up":
            return [f"self.{a2}.{attr} += self"]
        srcs = self.self_sources(t)
        if k2 == "multi" and self.chance(0.4) and "comprehension-order" not in self.avoid:
            conds = [a for a in o2.attrs() if a.typ in (INT, BOOL) and a.mode == "open"]
            if conds:
                a = self.pick(conds)
                c = f"c.{a.name}" if a.typ == BOOL else f"c.{a.name} > {self.r.randint(0, 6)}"
                return [f"self.{attr} = [c for c in self.{a2} if {c}]"]
        if self.chance(0.25):
            c, _ = self.bool_expr(srcs, 1)
            return [f"self.{attr} += ({c} ? self.{a2} : [])"]
        return [f"self.{attr} {self.pick(['=', '+='])} self.{a2}"]

    def gen_impl_writes(self):
        for t in self.types:
            if self.chance(0.5):
                stmt = self.impl_write(t.impls[0])
                if stmt:
                    t.impls[0].body.append(stmt)

    def gen_rel_conditioned_impls(self):
        """Conditional implementations whose `when` reads a relation (`is defined`, a count):
        they run only once the relation is frozen or has a value, exercising freeze order."""
        for t in self.types:
            if not self.chance(0.5 if self.chaos else 0.15):
                continue
            ends = [e for e in self.multi_ends(t) if e[4] in ("multi", "opt")]
            if not ends:
                continue
            rel, end, attr, other, kind = self.pick(ends)
            pre = self.pick(["self.", ""])
            if kind == "opt" or self.chance(0.3):
                cond = f"{pre}{attr} is defined"
            else:
                cond = f"std::count({pre}{attr}) {self.pick(['>', '==', '<'])} {self.r.randint(0, 2)}"
            impl = Impl(f"{t.name.lower()}_when_{attr}", t, cond)
            impl.body.append([f'std::print("{impl.name} {{{{self.name}}}}")'])
            if self.chance(0.5):
                stmt = self.impl_write(impl, frozenset({("rel", rel.rid)}))
                if stmt:
                    impl.body.append(stmt)
            t.impls.append(impl)

    # ---------------------------------------------------------------- errors (low rate)
    def inject_error(self):
        """Adds one erroneous shape; returns its tag."""
        opts = ["double_set", "missing_attr", "type_mismatch", "missing_key", "cycle", "index_clash",
                "optional_read", "freeze_cycle", "arity", "null_attr", "dict_key", "lower_bound",
                "impl_double_set", "two_incomplete", "loop_double_set", "wrong_entity", "cond_not_bool",
                "impl_type", "bad_operand"]
        self.r.shuffle(opts)
        for o in opts:
            if getattr(self, "err_" + o)():
                return o
        return None

    def open_attr_insts(self, typs=(INT, STR, BOOL)):
        out = []
        for i in self.insts:
            for a in i.etype.attrs():
                if a.name != "name" and a.typ in typs:
                    out.append((i, a))
        return out

    def err_impl_double_set(self):
        """An implementation sets an attribute the constructor (or a default) already set."""
        cands = [(t, a) for t in self.types for a in t.attrs()
                 if a.mode == "open" and a.name != "name" and a.typ in (INT, STR, BOOL)]
        if not cands:
            return False
        t, a = self.pick(cands)
        t.impls[0].body.append([f"self.{a.name} = {self.const(a.typ)}"])
        return any(i.etype.is_a(t) for i in self.all_insts)

    def err_impl_type(self):
        cands = [(t, a) for t in self.types for a in t.own_attrs if a.mode == "impl" and a.typ in (INT, BOOL)]
        if not cands:
            return False
        t, a = self.pick(cands)
        for impl in t.impls:
            for k, stmt in enumerate(impl.body):
                if stmt[0].startswith(f"self.{a.name} = "):
                    impl.body[k] = [f'self.{a.name} = "oops"'] + stmt[1:]
                    return True
        return False

    def err_two_incomplete(self):
        cands = [t for t in self.types if t.required_attrs()]
        if not cands:
            return False
        for k in range(2):
            t = self.pick(cands)
            self.top.append([f'{t.name}(name="incomplete{k}")'])
        if self.chance(0.5):
            idx = [t for t in self.types if t.indexed]
            if idx:
                v = self.new_var("l")
                self.top.append([f'{v} = {self.pick(idx).name}[name="missing"]'])
        return True

    def err_loop_double_set(self):
        reads = [x for x in self.rel_sources_top() if not x[4] and x[5] > 0]
        if not reads:
            return False
        text, rel, end, other, single, d = self.pick(reads)
        attrs = [a for a in other.attrs() if a.mode == "open" and a.typ == INT]
        if not attrs:
            return False
        a = self.pick(attrs)
        self.top.append([f"for z in {text}:", f"    z.{a.name} = 1234", "end"])
        return True

    def err_wrong_entity(self):
        for rel in self.rels:
            for inst in self.insts:
                if not inst.etype.is_a(rel.src):
                    continue
                wrong = [i for i in self.insts if not i.etype.is_a(rel.tgt)]
                if wrong:
                    op = "=" if rel.src_single else "+="
                    self.top.append([f"{inst.var}.{rel.name} {op} {self.pick(wrong).var}"])
                    return True
        return False

    def err_cond_not_bool(self):
        ints = [s for s in self.pool if s.typ in (INT, STR)]
        if not ints:
            return False
        s = self.pick(ints)
        form = self.r.randint(0, 2)
        if form == 0:
            self.top.append([f"if {s.text}:", '    std::print("yes")', "end"])
        elif form == 1:
            self.top.append([f'std::print({s.text} ? "a" : "b")'])
        else:
            self.top.append([f'std::print([x for x in ["a"] if {s.text}])'])
        return True

    def err_bad_operand(self):
        """An operator applied to operands of the wrong type (a run-time TypingException or
        RuntimeException located at the operator)."""
        ints = [x.text for x in self.pool if x.typ == INT] or ["3"]
        strs = [x.text for x in self.pool if x.typ == STR] or ['"s"']
        i, s = self.pick(ints), self.pick(strs)
        form = self.pick([f"{i} + {s}", f"{s} < {i}", f"{i} and true", f"not {s}", f"[{i}] + [{i}]",
                          f"{s} - {s}", f"{i} or {i} > 1"])
        stmt = f"{self.new_var('bad')} = {form}"
        if "layout" not in self.avoid and self.chance(0.5):
            self.top.append(self.split_layout(stmt))
        else:
            self.top.append([stmt])
        return True

    def err_double_set(self):
        cands = self.open_attr_insts()
        if not cands:
            return False
        i, a = self.pick(cands)
        v = {INT: "99", STR: '"zz"', BOOL: "true"}[a.typ]
        if a.typ == BOOL:  # one of the two conflicts with whatever value it has
            self.top.append([f"{i.var}.{a.name} = true"])
            self.top.append([f"{i.var}.{a.name} = false"])
        else:
            self.top.append([f"{i.var}.{a.name} = {v}"])
        return True

    def err_missing_attr(self):
        cands = [t for t in self.types if t.required_attrs()]
        if not cands:
            return False
        t = self.pick(cands)
        self.top.append([f'{t.name}(name="incomplete")'])
        return True

    def override_attr(self, types, value):
        """Gives an open attribute of one type in `types`, on some instance, `value` in its
        constructor instead of the value the model had for it, wherever it was set."""
        cands = self.open_attr_insts(types)
        if not cands:
            return False
        i, a = self.pick(cands)
        i.kwargs = [k for k in i.kwargs if not k.startswith(a.name + "=")] + [f"{a.name}={value}"]
        i.late = [x for x in i.late if not x.startswith(f"{i.var}.{a.name} ")]
        return True

    def err_type_mismatch(self):
        return self.override_attr((INT, BOOL, STRS), '"wrong"')

    def err_missing_key(self):
        cands = [t for t in self.types if t.indexed]
        if not cands:
            return False
        t = self.pick(cands)
        v = self.new_var("l")
        self.top.append([f'{v} = {t.name}[name="nope"]'])
        self.top.append([f"std::print({v}.name)"])
        return True

    def err_cycle(self):
        a, b = self.new_var("cy"), self.new_var("cy")
        self.top.append([f"{a} = {b} + 1"])
        self.top.append([f"{b} = {a}"])
        self.top.append([f"std::print({a})"])
        return True

    def err_index_clash(self):
        idx = [i for i in self.insts if i.etype.root_indexed()]
        if not idx:
            return False
        i = self.pick(idx)
        t = i.etype
        others = [u for u in self.types if u is not t and (u.is_a(t) or t.is_a(u)) and u.root_indexed()]
        if others and self.chance(0.5):
            u = self.pick(others)
            args = [f'name="{i.name}"'] + [f"{a.name}={self.const(a.typ)}" for a in u.required_attrs()]
            self.top.append([f"{u.name}({', '.join(args)})"])
            return True
        opens = [a for a in t.attrs() if a.name != "name" and a.mode == "open" and a.typ == INT]
        if not opens:
            return False
        a = opens[0]
        args = [f'name="{i.name}"', f"{a.name}=77"]
        self.top.append([f"{t.name}({', '.join(args)})"])
        return True

    def err_optional_read(self):
        for inst in self.insts:
            for rel, end in self.rels_from(inst.etype):
                mult = rel.mult_src if end == "src" else rel.mult_tgt
                if mult == "[0:1]" and self.degrees.get((rel.rid, end, inst.name), 0) == 0:
                    attr = rel.name if end == "src" else rel.rev
                    self.top.append([f"std::print({inst.var}.{attr}.name)"])
                    return True
        return False

    def err_freeze_cycle(self):
        frees = [(r, i) for r in self.rels if not r.bounded for i in self.insts if i.etype.is_a(r.src)]
        tg = None
        for r, i in frees:
            tg = [t for t in self.insts if t.etype.is_a(r.tgt)]
            if tg:
                t = self.pick(tg)
                self.top.append([f"if std::count({i.var}.{r.name}) == 0:", f"    {i.var}.{r.name} += {t.var}", "end"])
                return True
        return False

    def err_arity(self):
        for rel in self.rels:
            if rel.mult_src in ("[1]", "[0:1]"):
                for inst in self.insts:
                    if inst.etype.is_a(rel.src) and self.degrees.get((rel.rid, "src", inst.name), 0) == 1:
                        tg = [t for t in self.insts if t.etype.is_a(rel.tgt)
                              and (rel.rid, inst.name, t.name) not in self.edges]
                        if tg and (not rel.tgt_single):
                            self.top.append([f"{inst.var}.{rel.name} = {self.pick(tg).var}"])
                            return True
            if rel.mult_src in ("[1:2]", "[2:3]", "[0:2]", "[1:3]"):
                for inst in self.insts:
                    if inst.etype.is_a(rel.src) and not rel.tgt_single:
                        ctor = self.pick(self.child_types(rel.tgt))
                        if ctor.required_attrs():
                            continue
                        news = ", ".join(f'{ctor.name}(name="{inst.name}-over{k}")' for k in range(4))
                        self.top.append([f"{inst.var}.{rel.name} += [{news}]"])
                        return True
        return False

    def err_null_attr(self):
        return self.override_attr((INT, STR), "null")

    def err_dict_key(self):
        cands = self.open_attr_insts((DICT,))
        if not cands:
            return False
        i, a = self.pick(cands)
        self.top.append([f'std::print({i.var}.{a.name}["zz"])'])
        return True

    def err_lower_bound(self):
        for rel in self.rels:
            for end, typ, mult in (("src", rel.src, rel.mult_src), ("tgt", rel.tgt, rel.mult_tgt)):
                if mult in ("[1]", "[1:]", "[2:]", "[1:2]", "[2:3]", "[1:3]"):
                    args = [f'name="lonely"'] + [f"{a.name}={self.const(a.typ)}" for a in typ.required_attrs()]
                    self.top.append([f"{typ.name}({', '.join(args)})"])
                    return True
        return False

    # ---------------------------------------------------------------- rendering
    def render(self) -> str:
        out = []
        for t in self.types:
            head = f"entity {t.name}" + (f" extends {t.parent.name}" if t.parent else "") + ":"
            out.append(head)
            for a in t.own_attrs:
                out.append(f"    {a.typ} {a.name}" + (f" = {a.default}" if a.default is not None else ""))
            for name, d in t.default_overrides.items():
                typ = t.parent.attr(name).typ
                out.append(f"    {typ} {name} = {d}")
            out.append("end")
        for rel in self.rels:
            tgt = f"{rel.tgt.name}.{rel.rev} {rel.mult_tgt}" if rel.rev else rel.tgt.name
            out.append(f"{rel.src.name}.{rel.name} {rel.mult_src} -- {tgt}")
        for t in self.types:
            if t.indexed:
                out.append(f"index {t.name}(name)")
        out.append("")
        for t in self.types:
            for impl in t.impls:
                if not impl.body:
                    continue
                body = list(impl.body)
                if self.chance(0.5):
                    self.r.shuffle(body)
                out.append(f"implementation {impl.name} for {t.name}:")
                for stmt in body:
                    out += indent(stmt)
                out.append("end")
        for t in self.types:
            out += self.render_implements(t)
        out += self.scenario_defs
        out.append("")
        top = list(self.top)
        for inst in self.insts:
            extra = self.ctor_extra.get(inst.name, [])
            if inst.lookup:
                top.append([f"{inst.var} = {self.index_owner(inst.etype).name}[name={q(inst.name)}]"])
                top.append([self.constructor_text(inst, extra)])
            else:
                top.append([f"{inst.var} = {self.constructor_text(inst, extra)}"])
            for late in inst.late:
                top.append([late])
        mode = self.r.random()
        if mode < 0.5:
            self.r.shuffle(top)
        elif mode < 0.8:
            # mostly in order, a few statements moved up
            for _ in range(len(top) // 3):
                i, j = self.r.randrange(len(top)), self.r.randrange(len(top))
                top[i], top[j] = top[j], top[i]
        for stmt in top:
            if len(stmt) == 1 and "layout" not in self.avoid and self.chance(0.12):
                stmt = self.split_layout(stmt[0])
            out += stmt
        return "\n".join(out) + "\n"

    OPERATORS = [" + ", " - ", " * ", " and ", " or ", " == ", " != ", " > ", " < ", " >= ", " <= ", " ? ", " : "]

    def split_layout(self, line: str) -> list:
        """Spreads one statement over two lines at a binary operator or after an opening
        bracket or a comma (newlines are not significant), outside string literals; error
        locations must stay the same as the reference's."""
        spots, quote, depth = [], None, 0
        for i, ch in enumerate(line):
            if quote:
                if ch == "\\":
                    continue
                if ch == quote:
                    quote = None
                continue
            if ch in "\"'":
                quote = ch
                continue
            if ch in "([{":
                depth += 1
                spots.append(("after", i))
            elif ch in ")]}":
                depth -= 1
            elif ch == ",":
                spots.append(("after", i))
            for op in self.OPERATORS:
                if line.startswith(op, i):
                    spots.append((self.pick(["before", "after"]), i + (0 if op == " : " else 0)))
                    spots[-1] = (spots[-1][0], i if spots[-1][0] == "before" else i + len(op) - 1)
        if not spots:
            return [line]
        where, i = self.pick(spots)
        if where == "before":
            return [line[:i], "    " + line[i + 1:]]
        return [line[:i + 1].rstrip(), "    " + line[i + 1:].lstrip()]

    def render_implements(self, t: EType):
        lines = []
        main = t.impls[0]
        uncond = [main.name] if main.body else []
        if t.uses_parents:
            uncond = (["parents"] + uncond) if self.chance(0.5) else (uncond + ["parents"])
        if not uncond:
            uncond = ["std::none"]
        elif self.chance(0.3) and "parents" not in uncond:
            uncond.append("std::none")
        if len(uncond) > 1 and self.chance(0.4):
            for u in uncond:
                lines.append(f"implement {t.name} using {u}")
        else:
            lines.append(f"implement {t.name} using {', '.join(uncond)}")
        for impl in t.impls[1:]:
            name = impl.name if impl.body else "std::none"
            lines.append(f"implement {t.name} using {name} when {impl.cond}")
        return lines

    # ---------------------------------------------------------------- driver
    def generate(self, error_rate=0.2) -> str:
        self.gen_types()
        self.gen_relations()
        self.gen_impl_skeletons()
        self.gen_instances()
        self.gen_bounded_fills()
        self.simulate()
        self.gen_impl_writes()
        self.gen_rel_conditioned_impls()
        self.gen_impl_reads()
        self.gen_free_fills()
        for _ in range(self.r.randint(0, 2)):
            self.gen_top_loops()
        self.gen_prints_top(self.r.randint(2, 6))
        if "dup-loops" not in self.avoid and self.chance(0.3):
            self.gen_list_loops()
        if self.chance(0.1):
            self.gen_float_print()
        if self.chance(0.4):
            self.gen_value_prints()
        if "scenarios" not in self.avoid:
            self.gen_scenarios()
        if self.chance(0.5):
            self.gen_lookups()
        if self.chance(error_rate):
            self.error_kind = self.inject_error()
        return self.render()


def generate_model(seed: int, index: int, avoid=frozenset()) -> tuple[str, str | None]:
    """The model for (seed, index) and the tag of the injected error, if any."""
    for attempt in range(20):
        rng = random.Random(f"eval-fuzz:{seed}:{index}:{attempt}")
        gen = ModelGen(rng, avoid)
        try:
            text = gen.generate()
        except (RuntimeError, AssertionError, IndexError):
            continue
        n = text.count("\n")
        if 20 <= n <= 80:
            return text, gen.error_kind
    return text, gen.error_kind


# --------------------------------------------------------------------------------------------
# Running weft and the oracle, comparing
# --------------------------------------------------------------------------------------------


def run_weft(weft: str, case: Path, timeout=60) -> dict:
    try:
        cp = subprocess.run([weft, "compile", "--error-format", "json", str(case)], capture_output=True,
                            text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"ok": False, "timeout": True, "prints": [], "error": ("Timeout", None), "cause": None,
                "stdout": "", "stderr": "timeout", "rc": None}
    prints = cp.stdout.split("\n")
    if prints and prints[-1] == "":
        prints.pop()
    err, cause = None, None
    for d in json_diagnostics(cp.stderr):
        if d.get("severity") != "error":
            continue
        err = (d.get("kind"), d.get("line"))
        if d.get("code") == "E0011" and err[1] is not None:
            # An unexpected end of file: weft points at the end of the text, the reference one
            # line further, past the newline it appends to every file before parsing (the rule
            # of tests/src/parser.rs `weft_outcome`).
            err = (err[0], err[1] + 1)
        notes = d.get("notes") or []
        if notes:
            msg = notes[0].get("message", "")
            if msg.startswith("caused by "):
                note = msg[len("caused by "):]
                kind, _, rest = note.partition(": ")
                cause = rest.split(":", 1)[0] if kind == "ExternalException" else kind
        break
    if cp.returncode != 0 and err is None:
        err = ("<crash rc=%s>" % cp.returncode, None)
    return {"ok": err is None, "prints": sorted(prints), "error": err, "cause": cause,
            "stdout": cp.stdout, "stderr": cp.stderr, "rc": cp.returncode}


def mismatch(expect: dict, actual: dict) -> str | None:
    """The conformance rule of tests/tests/conformance.rs."""
    exp_ok = expect["status"] == "ok"
    if exp_ok != actual["ok"]:
        got = "ok" if actual["ok"] else f"error {actual['error'][0]} at line {actual['error'][1]}"
        return f"status: expected {expect['status']}, got {got}"
    if exp_ok:
        if sorted(expect["prints"]) != actual["prints"]:
            return f"prints: expected {sorted(expect['prints'])}, got {actual['prints']}"
        return None
    want = expect["error"]
    kind, line = actual["error"]
    if want["kind"] in ("ZeroDivisionError", "ModuleNotFoundError"):
        return None
    if kind != want["kind"]:
        return f"kind: expected {want['kind']}, got {kind} (line {line})"
    if want.get("line") is not None and want["line"] != line:
        return f"line: expected {want['line']}, got {line} ({kind})"
    if actual["cause"] is not None and (want.get("causes") or [None])[0] != actual["cause"]:
        return f"cause: expected {want.get('causes')}, got {actual['cause']} ({kind})"
    return None


def describe_expect(e: dict) -> str:
    if e["status"] == "ok":
        return f"ok, {len(e['prints'])} prints"
    er = e["error"]
    return f"error {er['kind']}@{er['line']} ({er['message'][:100]})"


def describe_actual(a: dict) -> str:
    if a["ok"]:
        return f"ok, {len(a['prints'])} prints"
    return f"error {a['error'][0]}@{a['error'][1]}"


def run_oracle(oracle: str, venv: str, root: Path, jobs: int) -> str:
    env = dict(os.environ, INMANTA_REF_VENV=venv)
    cp = subprocess.run([sys.executable, oracle, "--jobs", str(jobs), "--quiet", str(root)],
                        env=env, capture_output=True, text=True)
    return cp.stdout + cp.stderr


def compare_cases(cases, weft, jobs=4, verbose=True):
    results = {}

    def one(case):
        exp_file = case / "expect.json"
        if not exp_file.exists():
            return case, None, None, "no expect.json (reference failure/timeout)"
        expect = json.loads(exp_file.read_text())
        actual = run_weft(weft, case)
        return case, expect, actual, mismatch(expect, actual)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for case, expect, actual, diff in pool.map(one, cases):
            results[case] = (expect, actual, diff)
    return results


# --------------------------------------------------------------------------------------------
# Reduction of a disagreeing case
# --------------------------------------------------------------------------------------------


def split_chunks(lines: list[str], depth: int) -> list[list[int]]:
    """Groups line numbers into removable statements at the given indentation depth (0: top
    level items such as entity blocks and statements; 1+: statements inside blocks). A block
    statement carries its body and its `end`; `else:`/`elif` lines stay with their `if`."""
    chunks, cur = [], None
    pad = "    " * depth
    for i, line in enumerate(lines):
        stripped = line.strip()
        ind = len(line) - len(line.lstrip(" "))
        if not stripped:
            continue
        starts = ind == len(pad) and not stripped.startswith(("end", "else:", "elif ")) and line.startswith(pad)
        if starts:
            cur = [i]
            chunks.append(cur)
        elif cur is not None and ind >= len(pad):
            cur.append(i)
        else:
            cur = None
    if depth > 0:  # only inner statements, never the block headers of the outer level
        chunks = [c for c in chunks if len(lines[c[0]]) - len(lines[c[0]].lstrip(" ")) == len(pad)]
    return chunks


def signature(expect: dict, actual: dict) -> str | None:
    """The kind of disagreement that must be kept while reducing."""
    diff = mismatch(expect, actual)
    if diff is None:
        return None
    return diff.split(":", 1)[0] + "|" + expect["status"] + "|" + ("ok" if actual["ok"] else actual["error"][0])


def json_diagnostics(stderr: str):
    """The diagnostics `weft --error-format json` wrote to stderr, one dict each."""
    for line in stderr.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


def remove_chunks(lines: list[str], try_batch, jobs: int, depths) -> list[str]:
    """Greedy removal of chunks (top-level items at depth 0, statements inside blocks deeper),
    `2 * jobs` candidates a batch, halving the run of chunks removed when none is kept;
    `try_batch(candidates)` returns the first candidate that still disagrees the same way, or
    None. Returns the reduced lines. Shared by the fuzzers' reducers."""
    changed = True
    while changed:
        changed = False
        for depth in depths:
            chunks = split_chunks(lines, depth)
            size = max(1, len(chunks) // 2)
            while size >= 1:
                i, progress = 0, False
                while i < len(chunks):
                    batch, j = [], i
                    while j < len(chunks) and len(batch) < 2 * jobs:
                        drop = {n for c in chunks[j:j + size] for n in c}
                        batch.append([l for n, l in enumerate(lines) if n not in drop])
                        j += size
                    got = try_batch(batch)
                    if got is not None:
                        lines = got
                        chunks = split_chunks(lines, depth)
                        changed = progress = True
                        print(f"  {len([l for l in lines if l.strip()])} lines", flush=True)
                    else:
                        i = j
                if not progress:
                    size //= 2
    return lines


def reduce_case(case: Path, out: Path, weft: str, oracle: str, venv: str, jobs: int) -> int:
    """Greedy reduction: removes top-level items, then statements inside blocks, a run at a
    time, keeping a candidate when the reference and weft still disagree in the same way."""
    expect = json.loads((case / "expect.json").read_text())
    target = signature(expect, run_weft(weft, case))
    if target is None:
        print("the case does not disagree")
        return 1
    print(f"reducing {case}: {target}")
    lines = (case / "main.cf").read_text().split("\n")
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    weft_kind = target.split("|")[2]
    tests = 0

    def try_batch(cands: list[list[str]]):
        """The first candidate that still disagrees in the same way, or None."""
        nonlocal tests
        for old in work.glob("cand*/main.cf"):
            old.unlink()
        keep = []
        for k, cand in enumerate(cands):
            d = work / f"cand{k}"
            d.mkdir(exist_ok=True)
            (d / "main.cf").write_text("\n".join(cand))
            (d / "expect.json").unlink(missing_ok=True)
            a = run_weft(weft, d)
            # weft first: a candidate whose weft outcome changed kind cannot keep the
            # disagreement in the same way (saves reference runs)
            if ("ok" if a["ok"] else a["error"][0]) == weft_kind:
                keep.append((k, d, a))
            else:
                (d / "main.cf").unlink()
        if not keep:
            return None
        run_oracle(oracle, venv, work, jobs)
        tests += len(keep)
        for k, d, a in keep:
            if (d / "expect.json").exists():
                e = json.loads((d / "expect.json").read_text())
                if signature(e, a) == target:
                    return cands[k]
        return None

    # first try to keep only a small window of top-level items (everything else removed)
    chunks = split_chunks(lines, 0)
    windows = [(i, w) for w in (1, 2, 3, 4) for i in range(len(chunks) - w + 1)]
    for b in range(0, len(windows), 8):
        cands = []
        for i, w in windows[b:b + 8]:
            keep_lines = {n for c in chunks[i:i + w] for n in c}
            cands.append([l for n, l in enumerate(lines) if n in keep_lines])
        got = try_batch(cands)
        if got is not None:
            lines = got
            print(f"  kept a window: {len([l for l in lines if l.strip()])} lines", flush=True)
            break

    lines = remove_chunks(lines, try_batch, jobs, (0, 1, 2, 3))
    (out / "main.cf").write_text("\n".join(lines))
    print(f"reduced to {len([l for l in lines if l.strip()])} lines after {tests} reference runs: {out / 'main.cf'}")
    return 0


def main() -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("/tmp/eval-fuzz"))
    ap.add_argument("--weft", default=str(here.parent / "target" / "release" / "weft"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--oracle", default="/work/shared/tools/oracle.py")
    ap.add_argument("--venv", default=os.environ.get("INMANTA_REF_VENV", "/tmp/refstd-venv"))
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--check", nargs="*", type=Path)
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--reduce", type=Path, help="reduce this disagreeing case (needs its expect.json)")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--avoid", default="", help="comma-separated generator features to switch off, "
                    "to keep a known disagreement from hiding others: " + ", ".join(FEATURES))
    args = ap.parse_args()
    avoid = frozenset(x for x in args.avoid.split(",") if x)
    unknown = avoid - set(FEATURES)
    if unknown:
        ap.error(f"unknown features: {sorted(unknown)}")

    if args.reduce is not None:
        return reduce_case(args.reduce, args.out, args.weft, args.oracle, args.venv, args.jobs)

    if args.show:
        text, err = generate_model(args.seed, args.index, avoid)
        print(text, end="")
        print(f"# injected error: {err}", file=sys.stderr)
        return 0

    if args.check is not None:
        cases = args.check
    else:
        gen_root = args.out / "gen"
        gen_root.mkdir(parents=True, exist_ok=True)
        cases = []
        tags = {}
        for i in range(args.count):
            text, err = generate_model(args.seed, i, avoid)
            case = gen_root / f"case_{args.seed}_{i}"
            case.mkdir(exist_ok=True)
            (case / "main.cf").write_text(text)
            if err:
                (case / "injected.txt").write_text(err + "\n")
            elif (case / "injected.txt").exists():
                (case / "injected.txt").unlink()
            cases.append(case)
            tags[case] = err
        if not args.no_oracle:
            for case in cases:
                (case / "expect.json").unlink(missing_ok=True)
            print(f"running the oracle on {len(cases)} cases ...", flush=True)
            log = run_oracle(args.oracle, args.venv, gen_root if args.count else args.out, args.jobs)
            # only report the oracle's problem lines
            for line in log.splitlines():
                if "FAILURE" in line or "CRASH" in line or line.startswith("   "):
                    print("oracle: " + line)
    results = compare_cases(cases, args.weft)
    n_ok = n_err = n_diff = n_missing = 0
    for case in cases:
        expect, actual, diff = results[case]
        if expect is None:
            n_missing += 1
            continue
        if expect["status"] == "ok":
            n_ok += 1
        else:
            n_err += 1
        if diff:
            n_diff += 1
            print(f"DISAGREE {case}\n   reference: {describe_expect(expect)}\n   weft:      "
                  f"{describe_actual(actual)}\n   {diff[:400]}")
    print(f"SUMMARY {'seed=' + str(args.seed) + ' ' if args.check is None else ''}cases={len(cases)} reference_ok={n_ok} reference_error={n_err} "
          f"no_reference={n_missing} disagreements={n_diff}")
    return 1 if n_diff else 0


if __name__ == "__main__":
    sys.exit(main())
