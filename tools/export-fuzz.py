#!/usr/bin/env python3
"""Random-model differential tester for the export: weft's resource graph against the reference's.

Generates small random Inmanta models (std only, about 5-40 resources) that stress what the
exporter does:
  * `requires`/`provides` edges between resources, written from either end, in constructors,
    `+=` statements, loops and implementations, naming the other end by variable, list, index
    lookup (`std::testing::NullResource[agentname=..., name=...]`) or list comprehension, with
    duplicates; the edges are kept acyclic (by resource position) unless a cycle is injected;
  * edges through entities that are not resources. In 18.0.1 the exporter keeps only the direct
    members of `requires` that are exported resources (Resource.convert_requires): nothing is
    mapped transitively by the exporter itself. So the models also have "services" (an
    implementation creates the resource and wires `after` edges, optionally replicas) and
    "stacks" (members, possibly nested, optionally a summary resource made `when
    std::count(self.members) > 1`) whose implementations may forward their `requires`/`provides`
    to their resources, as real modules do; plain groups and a `std::PurgeableResource` subtype
    that no Python code registers ("Fake") drop their edges;
  * std::ResourceSet (members that are not exported, a set constructed twice by name),
    std::AgentConfig (never exported: requires on it vanish), `managed=false` resources;
  * subclasses of NullResource (default overrides of agentname/value/int_value/send_event/...,
    extra attributes, a second plain parent, `implement ... using parents`, a sidecar resource
    made in an implementation with `provides=self`);
  * ids and fields: special characters (`=`, `,`, `[`, `]`, `],v=`), escapes (\\t, \\n, \\x00,
    \\u, \\U, \\N{...}), raw non-ASCII, raw/f/triple-quoted strings, interpolation,
    concatenation, numeric and boolean looking strings, ints up to 64 bits, expressions;
  * references: create_environment_reference (special names), nested, shared by several
    resources, create_int_reference (literals of every JSON type, references), two in one
    resource, create_fact_reference (of resources, sub-resources, AgentConfigs);
  * at a low rate erroneous shapes (one or two per model): duplicate id text, requires cycles
    (direct, self, through forwarding), a resource in two sets, index conflicts, a subclass and
    its parent with the same key, a reference in an index, in an AgentConfig's agent or in a
    set name, an AgentConfig for the "internal" agent, a string in requires, a fact of a plain
    entity, a reference whose value type does not fit the field.
Features that are known to disagree can be switched off with --avoid (see FEATURES).

For each model it records the reference's normalized export with tools/export-oracle.py (its
`run_case`, in this process: <case>/expect-export.json), runs `weft export --error-format json
-o <case>/weft-export.json <case>` and compares them.

Usage:
  export-fuzz.py --seed S --count N [--out DIR] [--weft PATH] [--jobs 2] [--venv DIR]
                 [--no-oracle] [--avoid FEATURE,...] [--warnings]
      generate N models (deterministic from S) as DIR/gen/case_<S>_<i>/main.cf, run the
      reference on them (writes expect-export.json), run weft on each and print every
      disagreement (case path, reference outcome, weft outcome, the difference) followed by a
      summary line. A case whose model got an error injected on purpose has an injected.txt
      naming it.
      --no-oracle   reuse the expect-export.json files already present (e.g. to re-check a
                    new weft)
      --avoid       switch generator features off (see FEATURES), so that a known
                    disagreement does not hide new ones
      --warnings    also print (as NOTE lines, not counted as disagreements) the cases where
                    the number of export warnings differs
  export-fuzz.py --check CASE_DIR [...] [--rerun] [--weft PATH] [--warnings]
      compare weft with an existing expect-export.json (no generation); --rerun records it
      first (a reference run per case), e.g. for a hand-written or hand-reduced case.
  export-fuzz.py --show --seed S --index I [--avoid ...]
      print the model that --seed S would generate as case I, without running anything.
  export-fuzz.py --reduce CASE_DIR --out DIR [--jobs 2]
      shrink a disagreeing case (greedy removal of top-level items and of statements inside
      blocks, as tools/eval-fuzz.py splits them, a reference run per candidate) while it
      disagrees in the same way; writes DIR/main.cf. Finish by hand.

Defaults: --out /tmp/exportfuzz, --weft target/release/weft of this repository, the reference
venv from --venv, else $INMANTA_REF_VENV, else ~/.cache/inmanta-ref/venv.

Comparison rule (as tests/tests/export.rs `compare`): the status must match; for an error only
weft's error kind must equal the reference's; for ok the resources, normalized as
export-oracle.py normalizes them (sorted by id, keys sorted, `requires` sorted, `references`
sorted by id, `mutators` by their JSON text), must be equal. Warnings are not compared (except
as notes with --warnings).

Exit status: 1 when a case disagrees, 2 on bad usage, 0 otherwise.
Only the Python standard library is used.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPECT = "expect-export.json"
WEFT_OUT = "weft-export.json"


def _load_tool(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, HERE / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# the reference runner and the normalization of the export (export-oracle.py) and the
# statement splitter of the reducer (eval-fuzz.py)
oracle = _load_tool("export_oracle", "export-oracle.py")
evalfuzz = _load_tool("eval_fuzz", "eval-fuzz.py")

NULL = "std::testing::NullResource"

# generator features that --avoid can switch off
FEATURES = {
    "references": "std::create_*_reference values in value/int_value",
    "services": "plain entities whose implementation creates a resource and wires `after` edges",
    "forwarding": "implementations forwarding requires/provides of a plain entity to resources",
    "stacks": "plain entities holding resources (members), with or without forwarding",
    "groups": "plain entities in requires/provides that nothing forwards (edges dropped)",
    "subclasses": "subclasses of NullResource (default overrides, extra attributes, sidecars)",
    "sets": "std::ResourceSet",
    "agentconfig": "std::AgentConfig instances",
    "unmanaged": "managed=false resources",
    "loops": "resources made in for loops",
    "special-strings": "names/agents/values with special characters, escapes, raw/f-strings",
    "merge": "a constructor repeated with the same index key (one instance)",
    "shuffle": "top-level statements in random order",
    "ref-type-mismatch": "(error shape) a reference whose value type does not fit the field: weft accepts it",
    "ref-container-args": "a list or dict as argument of create_int_reference: the reference fails to export it",
}

# --------------------------------------------------------------------------------------------
# Value pools (DSL text)
# --------------------------------------------------------------------------------------------

# name templates: {k} is a counter unique in the model, so names never collide
NAME_PLAIN = ['"r{k}"', '"res-{k}"', '"node_{k}"']
NAME_SPECIAL = [
    '"r{k}=x"', '"r{k},y"', '"[r{k}]"', '"r {k} sp"', '"tab\\t{k}"', '"q\\"{k}\\""',
    '"back\\\\{k}"', '"u\\u00e9{k}"', '"snow\\u2603{k}"', '"{k}"', '"-{k}.5"', '"a/b:{k}?q=1&r=2"',
    '"{{{{n}}}}-{k}"', '"r" + "{k}"', '"""tri "{k}" """', 'r"raw\\d{k}"', 'f"fs-{{n}}-{k}"',
    '"nl\\n{k}"', '"{k}e3"', '"0x{k}"', '"ü{k}"', '"nul\\x00{k}"', '"e\\U0001F600{k}"',
    '"\\N{{SNOWMAN}}{k}"', '"x{k}],v=3"', '"cr\\r{k}"', '"name={k}"', '"  {k}  "',
]
NAME_FIXED = ['"true"', '"True"', '"false"', '"null"', '"None"', '"0"', '"[]"', '"{}"']
AGENTS_PLAIN = ['"agent-1"', '"agent-2"', '"web"', '"db-agent"']
AGENTS_SPECIAL = ['"agent with spaces"', '"ag\\u00e9nt"', '"a,b"', '"a=b"', '"[agent]"', '""',
                  '"{{agent_var}}"', '"x.y.z"', '"UPPER"', '"a]"', '"agent[1]"', '"ag,v=1"']
VALUES = ['""', '"plain"', '"with \\"quotes\\""', '"multi\\nline"', '"tab\\there"', '"{{n}}"',
          '"{{agent_var}}/{{n}}"', '"a" + "b"', '"\\u00fcn\\u00efc\\u00f8d\\u00e9"', '"42"', '"true"',
          '"null"', '"{\\"json\\": 1}"', '"\'single\'"', '"back\\\\slash"', '"""long\ntext"""',
          '"\\x00\\x7f"', '"\\r\\b\\f"', '"\\N{SNOWMAN}"', '"\\U0001F600"']
INTS = ["0", "1", "-1", "42", "7", "2147483648", "-2147483649", "9007199254740993",
        "9223372036854775807", "-9223372036854775808", "3 * 7", "n", "n + 1", "std::length(\"abcd\")",
        "-5", "1000000"]
ENV_VARS = ["WEFT_FUZZ_A", "WEFT_FUZZ_B", "WEFT_FUZZ_TOKEN", "PATH_LIKE"]
# DSL string literals for reference arguments that stress the id (md5 of Python's json.dumps)
ENV_SPECIAL = ['"W \\"Q\\""', '"w\\u00e9"', '"a\\nb"', '"\\u2603"', '"\\U0001F600"', '""', '"back\\\\"',
               '"tab\\t"', '"{{n}}"', '"\\x7f\\x00"', '"/"', '"<>&\'"']
# literal arguments of create_int_reference (an object, not resolved at export)
INT_REF_ARGS = ['"12"', "12", '"-7"', "-7", "1.5", "100000000000000000000.0", "0.1", "-0.0", "true", "null", "9223372036854775807",
                '"x\\u00e9"']
# container arguments: the reference cannot serialize them (a proxy of the model's list/dict)
INT_REF_CONTAINERS = ["[1, 2]", '{"a": 1}', '[1, "b", null]', '{"k": [1.5, true]}', "[]"]
SET_NAMES = ['"set-{k}"', '"set {k}"', '"s,{k}"', '"s=\\u00e9{k}"', '"{k}"']
URIS = ['"local:"', '""', '"ssh://root@host-{k}:22"', '"host-{k}?python=python3"']


@dataclass
class Node:
    """Something that can be in a `requires` relation: a resource, or a plain entity instance.
    `lo`/`hi`: the span of resource positions an edge through it reaches (for acyclicity): an
    edge a -> b (a requires b) is kept acyclic when a.lo > b.hi."""
    kind: str  # "res", "service", "stack", "group", "set", "agentconfig"
    ref: str  # DSL expression naming it
    lo: float = 0.0
    hi: float = 0.0
    live: bool = True  # whether edges through it can become resource edges
    var: str | None = None
    typ: str = NULL
    kw: dict = field(default_factory=dict)  # constructor keywords (name -> DSL text)
    managed: bool = True
    members: list = field(default_factory=list)  # stack members


class ExportGen:
    def __init__(self, rng: random.Random, avoid=frozenset()):
        self.r = rng
        self.avoid = set(avoid)
        self.k = 0
        self.pos = 0.0
        self.defs: list[str] = []  # entity/implementation definitions
        self.top: list[list[str]] = []  # top-level statements (each a list of lines)
        self.nodes: list[Node] = []  # top-level nodes with a handle, in position order
        self.resources: list[Node] = []  # every resource with a handle
        self.n_resources = 0  # every resource, handles or not
        self.ids: set = set()
        self.fixed_names = list(NAME_FIXED)
        self.subclasses: list[tuple[str, str | None]] = []  # (name, default agent DSL or None)
        self.sidecar_types: set = set()
        self.error_kind = None
        self.edges: list = []  # (a, b): a requires b
        self.special = "special-strings" not in self.avoid and self.chance(0.7)
        self.uses_n = False

    # ------------------------------------------------------------------ helpers
    def chance(self, p):
        return self.r.random() < p

    def pick(self, seq):
        return self.r.choice(seq)

    def ok(self, feature, p):
        return feature not in self.avoid and self.chance(p)

    def next_k(self):
        self.k += 1
        return self.k

    def next_pos(self):
        self.pos += 1.0
        return self.pos

    def new_name(self):
        k = self.next_k()
        if self.special and self.chance(0.06) and self.fixed_names:
            name = self.fixed_names.pop(self.r.randrange(len(self.fixed_names)))
            return name
        tmpl = self.pick(NAME_SPECIAL) if self.special and self.chance(0.4) else self.pick(NAME_PLAIN)
        return tmpl.format(k=k)

    def new_agent(self):
        if self.chance(0.45):
            return None  # the default
        if self.special and self.chance(0.35):
            return self.pick(AGENTS_SPECIAL)
        return self.pick(AGENTS_PLAIN)

    def new_value(self):
        if self.special:
            return self.pick(VALUES)
        return self.pick(VALUES[:3])

    def new_int(self):
        return self.pick(INTS) if self.special else self.pick(INTS[:6])

    # ------------------------------------------------------------------ definitions
    def gen_subclasses(self):
        n = self.r.randint(1, 2)
        for i in range(n):
            name = self.pick(["Web", "Api", "Db", "Cache", "Queue"]) + str(i)
            parent = NULL
            if self.subclasses and self.chance(0.4):
                parent = self.pick(self.subclasses)[0]
            if self.chance(0.2):  # also a plain entity
                marker = f"Marker{i}"
                self.defs += [f"entity {marker}:", '    string label = "m"', "end",
                              f"implement {marker} using std::none", ""]
                parent += f", {marker}"
            lines = [f"entity {name} extends {parent}:"]
            agent = None
            if self.chance(0.4):
                agent = self.pick(AGENTS_PLAIN)
                lines.append(f"    string agentname = {agent}")
            if self.chance(0.3):  # a default is a constant
                consts = [v for v in VALUES if "{{" not in v and "+" not in v and '"""' not in v]
                lines.append(f"    string value = {self.pick(consts) if self.special else self.pick(VALUES[:3])}")
            if self.chance(0.3):
                lines.append(f"    int int_value = {self.pick(['8080', '-3', '0', '9223372036854775807'])}")
            if self.chance(0.2):
                lines.append(f"    bool send_event = {self.pick(['true', 'false'])}")
            if self.chance(0.15):
                lines.append(f"    bool purged = {self.pick(['true', 'false'])}")
            if self.chance(0.1):
                lines.append("    bool receive_events = false")
            if self.chance(0.4):
                lines.append(f"    int port = {self.r.randint(1, 65535)}")
            if self.chance(0.3):
                lines.append('    string[] tags = ["a", "b"]')
            if self.chance(0.2):
                lines.append('    dict meta = {"k": 1}')
            lines.append("end")
            self.defs += lines
            how = self.pick(["std::none", "std::none", "parents"])
            self.defs.append(f"implement {name} using {how}")
            if self.chance(0.35):
                impl = f"sidecar{i}"
                self.defs += [
                    f"implementation {impl} for {name}:",
                    '    std::testing::NullResource(name="{{self.name}}-sc", agentname=self.agentname, provides=self)',
                    "end",
                    f"implement {name} using {impl}",
                ]
                self.sidecar_types.add(name)
            self.defs.append("")
            self.subclasses.append((name, agent))

    def gen_service_defs(self):
        self.service_forward = self.ok("forwarding", 0.5)
        self.service_variant = self.pick(["resource", "resource", "plain", "provides"])
        self.service_replicas = self.chance(0.4)
        self.defs += [
            "entity Service:",
            "    string name",
            '    string agent = "services"',
            "    int replicas = 0",
            "end",
            "Service.after [0:] -- Service",
            "Service.needs [0:] -- std::Resource",
            "Service.resource [0:1] -- std::testing::NullResource",
            "",
            "implementation serviceResource for Service:",
            "    self.resource = std::testing::NullResource(name=self.name, agentname=self.agent, requires=self.needs)",
            "    for dep in self.after:",
        ]
        if self.service_variant == "resource":
            self.defs.append("        self.resource.requires += dep.resource")
        elif self.service_variant == "provides":
            self.defs.append("        dep.resource.provides += self.resource")
        else:  # a requirement on the plain entity: dropped unless forwarded
            self.defs.append("        self.requires += dep")
        self.defs += ["    end", "end", "implement Service using serviceResource"]
        if self.service_forward:
            self.defs += [
                "",
                "implementation serviceForward for Service:",
                "    self.resource.requires += self.requires",
                "    self.resource.provides += self.provides",
                "end",
                "implement Service using serviceForward",
            ]
        if self.service_replicas:
            self.defs += [
                "",
                "implementation serviceReplicas for Service:",
                "    for i in std::sequence(self.replicas):",
                '        std::testing::NullResource(name="{{self.name}}-replica-{{i}}", agentname=self.agent, '
                "requires=self.resource)",
                "    end",
                "end",
                "implement Service using serviceReplicas when self.replicas > 0",
            ]
        self.defs.append("")

    def gen_stack_defs(self):
        self.stack_forward = self.ok("forwarding", 0.6)
        self.defs += [
            "entity Stack:",
            "    string name",
            "end",
            "Stack.members [0:] -- std::Entity",
            "implement Stack using std::none",
        ]
        self.stack_summary = self.chance(0.4)
        if self.stack_summary:  # a resource requiring the members, once the count is known
            self.defs += [
                "implementation stackSummary for Stack:",
                '    std::testing::NullResource(name="summary-{{self.name}}", requires=self.members)',
                "end",
                "implement Stack using stackSummary when std::count(self.members) > 1",
            ]
        if self.stack_forward:
            self.defs += [
                "implementation stackForward for Stack:",
                "    for m in self.members:",
                "        m.requires += self.requires",
                "        m.provides += self.provides",
                "    end",
                "end",
                "implement Stack using stackForward",
            ]
        self.defs.append("")

    def gen_group_defs(self):
        self.defs += ["entity Group:", "end", "implement Group using std::none", ""]
        self.fake = self.chance(0.5)
        if self.fake:  # a std::Resource that no Python code registers: not exported
            self.defs += ["entity Fake extends std::PurgeableResource:", '    string name = "fake"', "end",
                          "implement Fake using std::none", ""]

    # ------------------------------------------------------------------ instances
    def resource_kwargs(self, typ):
        kw = {"name": self.new_name()}
        agent = self.new_agent()
        if agent is not None:
            kw["agentname"] = agent
        if self.chance(0.35):
            kw["value"] = self.new_value()
        if self.chance(0.3):
            kw["int_value"] = self.new_int()
        for f in ("fail", "send_event", "receive_events", "report_only", "purged", "purge_on_delete"):
            if self.chance(0.12):
                kw[f] = self.pick(["true", "false"])
        if self.ok("unmanaged", 0.08):
            kw["managed"] = "false"
        elif self.chance(0.05):
            kw["managed"] = "true"
        return kw

    def add_resource(self, typ=NULL):
        pos = self.next_pos()
        var = f"r{len(self.resources) + 1}"
        kw = self.resource_kwargs(typ)
        node = Node("res", var, pos, pos, var=var, typ=typ, kw=kw, managed=kw.get("managed") != "false")
        self.nodes.append(node)
        self.resources.append(node)
        self.n_resources += 1
        if typ in self.sidecar_types:
            self.n_resources += 1
        return node

    def add_service(self):
        pos = self.next_pos()
        var = f"svc{self.next_k()}"
        kw = {"name": self.new_name()}
        agent = self.new_agent()
        if agent is not None:
            kw["agent"] = agent
        replicas = 0
        if self.service_replicas and self.chance(0.4):
            replicas = self.r.randint(1, 3)
            kw["replicas"] = str(replicas)
        svc = Node("service", var, pos, pos, live=self.service_forward, var=var, kw=kw)
        res = Node("res", f"{var}.resource", pos, pos)
        # earlier services and resources this one depends on
        earlier_svcs = [n for n in self.nodes if n.kind == "service"]
        after = self.r.sample(earlier_svcs, min(len(earlier_svcs), self.r.randint(0, 2)))
        if after:
            kw["after"] = "[" + ", ".join(s.var for s in after) + "]"
        earlier_res = [n for n in self.resources if n.var and "." not in n.ref]
        needs = self.r.sample(earlier_res, min(len(earlier_res), self.r.choice([0, 0, 1, 2])))
        if needs:
            kw["needs"] = self.pick(["[" + ", ".join(n.var for n in needs) + "]", needs[0].var]) \
                if len(needs) == 1 else "[" + ", ".join(n.var for n in needs) + "]"
        self.nodes.append(svc)
        self.resources.append(res)
        self.n_resources += 1 + replicas
        self.top.append([f"{var} = Service({self.kwtext(kw)})"])
        return svc

    def add_loop(self):
        n = self.r.randint(2, 4)
        k = self.next_k()
        targets = [x for x in self.resources if x.var and "." not in x.ref]
        req = ""
        if targets and self.chance(0.6):
            req = f", requires={self.pick(targets).var}"
        agent = ""
        if self.chance(0.4):
            agent = f", agentname={self.pick(AGENTS_PLAIN)}"
        if self.chance(0.5):
            head = f"for i in std::sequence({n}):"
            name = f'"loop{k}-{{{{i}}}}"'
            extra = ", int_value=i"
        else:
            items = ", ".join(f'"it{j}"' for j in range(n))
            head = f"for i in [{items}]:"
            name = f'"loop{k}-" + i'
            extra = ", value=i"
        self.top.append([head, f"    {NULL}(name={name}{agent}{req}{extra})", "end"])
        self.n_resources += n
        self.next_pos()

    def add_stack(self):
        """A stack over some of the last resources: members hold a contiguous span."""
        cands = [x for x in self.nodes if x.kind in ("res", "stack", "service")]
        if len(cands) < 2:
            return None
        size = self.r.randint(1, min(4, len(cands)))
        start = self.r.randrange(len(cands) - size + 1)
        members = cands[start:start + size]
        if self.chance(0.2):  # a member that is not live (a group, a fake resource)
            others = [x for x in self.nodes if x.kind == "group"]
            if others:
                members.append(self.pick(others))
        var = f"st{self.next_k()}"
        live = [m for m in members if m.live]
        if not live:
            lo = hi = self.next_pos()
        else:
            lo, hi = min(m.lo for m in live), max(m.hi for m in live)
        st = Node("stack", var, lo, hi, live=self.stack_forward, var=var, kw={"name": f'"stack-{self.k}"'},
                  members=members)
        st.kw["members"] = "[" + ", ".join(m.var for m in members) + "]"
        self.nodes.append(st)
        self.top.append([f"{var} = Stack({self.kwtext(st.kw)})"])
        if self.stack_summary:
            self.n_resources += 1
        return st

    def add_group(self):
        var = f"g{self.next_k()}"
        # a group never forwards: its position does not matter
        g = Node("group", var, -1e9, 1e9, live=False, var=var)
        self.nodes.append(g)
        if self.fake and self.chance(0.5):
            g.typ = "Fake"
            g.kw["name"] = f'"fake-{self.k}"'
            self.top.append([f"{var} = Fake({self.kwtext(g.kw)})"])
        else:
            g.typ = "Group"
            self.top.append([f"{var} = Group()"])
        return g

    def add_agentconfig(self):
        var = f"ac{self.next_k()}"
        kw = {"agentname": f'"agent-cfg-{self.k}"', "autostart": self.pick(["true", "false"])}
        if self.chance(0.5):
            kw["uri"] = self.pick(URIS).format(k=self.k)
        if self.chance(0.2):
            kw["agent"] = self.pick(AGENTS_PLAIN)
        if self.chance(0.2):
            kw["purged"] = "true"
        node = Node("agentconfig", var, -1e9, 1e9, live=False, var=var, kw=kw)
        self.nodes.append(node)
        self.top.append([f"{var} = std::AgentConfig({self.kwtext(kw)})"])
        return node

    @staticmethod
    def kwtext(kw):
        return ", ".join(f"{k}={v}" for k, v in kw.items())

    # ------------------------------------------------------------------ edges
    def gen_edges(self):
        """Random acyclic requires edges between nodes (a requires b only when a.lo > b.hi, or
        when one end is not live), each written one of several ways."""
        ends = [n for n in self.nodes if n.kind in ("res", "service", "stack", "group", "agentconfig")]
        ends += [r for r in self.resources if "." in r.ref]  # service resources, by svc.resource
        if len(ends) < 2:
            return
        target = self.r.randint(len(ends) // 2, len(ends) * 2)
        for _ in range(target):
            a, b = self.r.sample(ends, 2)
            if a.live and b.live and not a.lo > b.hi:
                a, b = b, a
                if not a.lo > b.hi:
                    continue
            if a.kind == "agentconfig" and b.kind == "agentconfig":
                continue
            self.edges.append((a, b))
        if self.chance(0.2) and self.edges:  # a duplicated edge
            self.edges.append(self.pick(self.edges))

    def lookup(self, node: Node) -> str | None:
        """An index lookup that finds a top-level resource, when its key is plain text."""
        def plain(text):
            return text is not None and text.startswith('"') and text.endswith('"') and len(text) >= 2 \
                and "{{" not in text and '"""' not in text and "+" not in text and "\\" not in text
        if node.kind != "res" or "." in node.ref or not plain(node.kw.get("name")):
            return None
        agent = node.kw.get("agentname")
        if agent is None:
            agent = dict(self.subclasses).get(node.typ) or '"internal"'
        if not plain(agent):
            return None
        typ = node.typ if self.chance(0.5) else NULL
        return f"{typ}[agentname={agent}, name={node.kw['name']}]"

    def value_of(self, node: Node) -> str:
        """A DSL expression for a requires/provides value naming `node`: its variable, a list,
        an index lookup or a list comprehension."""
        roll = self.r.random()
        if roll < 0.15:
            found = self.lookup(node)
            if found:
                return found
        if roll < 0.25:
            if "." in node.ref:  # svc.resource
                base = node.ref.split(".")[0]
                return f"[s.resource for s in [{base}]]"
            return f"[x for x in [{node.ref}]]"
        return node.ref if roll < 0.75 else f"[{node.ref}]"

    def render_edges(self):
        ctor_req: dict = {}  # node id -> list of refs for a `requires=` keyword
        ctor_prov: dict = {}
        for a, b in self.edges:
            ways = ["stmt_req", "stmt_prov"]
            if a.kind in ("res", "stack", "group") and a.var and "." not in a.ref:
                ways.append("ctor_req")
            if b.kind in ("res", "stack", "group") and b.var and "." not in b.ref:
                ways.append("ctor_prov")
            way = self.pick(ways)
            if way == "ctor_req":
                ref = (self.lookup(b) if self.chance(0.15) else None) or b.ref
                ctor_req.setdefault(id(a), (a, []))[1].append(ref)
            elif way == "ctor_prov":
                ref = (self.lookup(a) if self.chance(0.15) else None) or a.ref
                ctor_prov.setdefault(id(b), (b, []))[1].append(ref)
            elif way == "stmt_req":
                self.top.append([f"{a.ref}.requires += {self.value_of(b)}"])
            else:
                self.top.append([f"{b.ref}.provides += {self.value_of(a)}"])
        for rel, table in (("requires", ctor_req), ("provides", ctor_prov)):
            for node, refs in table.values():
                if len(refs) == 1 and self.chance(0.5):
                    node.kw[rel] = refs[0]
                else:
                    node.kw[rel] = "[" + ", ".join(refs) + "]"

    # ------------------------------------------------------------------ sets and references
    def gen_sets(self):
        cands = [x for x in self.resources] + [n for n in self.nodes if n.kind == "agentconfig"
                                               or (n.kind == "group" and n.typ == "Fake")]
        self.r.shuffle(cands)
        used = set()
        for _ in range(self.r.randint(1, 3)):
            members = [c for c in cands if id(c) not in used][: self.r.randint(0, 4)]
            for m in members:
                used.add(id(m))
            refs = [m.ref for m in members]
            if refs and self.chance(0.15):
                refs.append(refs[0])  # a member listed twice
            name = self.pick(SET_NAMES).format(k=self.next_k()) if self.special else f'"set-{self.next_k()}"'
            text = f"std::ResourceSet(name={name}, resources=[{', '.join(refs)}])"
            if self.chance(0.15):  # the same set constructed again (same name: one instance)
                more = [c for c in cands if id(c) not in used][:2]
                for m in more:
                    used.add(id(m))
                self.top.append([f"std::ResourceSet(name={name}, resources=[{', '.join(m.ref for m in more)}])"])
            if self.chance(0.3):
                var = f"rs{self.k}"
                self.top.append([f"{var} = {text}"])
                if self.chance(0.3) and cands:
                    extra = [c for c in cands if id(c) not in used]
                    if extra:
                        used.add(id(extra[0]))
                        self.top.append([f"{var}.resources += {extra[0].ref}"])
            else:
                self.top.append([text])

    def env_name(self):
        if self.special and self.chance(0.4):
            return self.pick(ENV_SPECIAL)
        return f'"{self.pick(ENV_VARS)}"'

    def env_ref(self):
        return f"std::create_environment_reference({self.env_name()})"

    def gen_references(self):
        top_res = [x for x in self.resources if x.var and "." not in x.ref]
        shared = None
        if self.chance(0.5):
            shared = "tok"
            self.top.append([f"tok = {self.env_ref()}"])
        for res in self.r.sample(top_res, min(len(top_res), self.r.randint(1, 4))):
            choice = self.r.randint(0, 6)
            if choice == 0 and shared:
                res.kw["value"] = shared
            elif choice <= 2:
                res.kw["value"] = self.env_ref()
            elif choice == 3:
                inner = self.env_ref() if not shared or self.chance(0.5) else shared
                res.kw["value"] = f"std::create_environment_reference({inner})"
            elif choice == 4:
                inner = self.pick(INT_REF_ARGS + [self.env_ref(), shared or self.env_ref(),
                                                  "std::create_int_reference(5)"])
                if self.ok("ref-container-args", 0.1):
                    inner = self.pick(INT_REF_CONTAINERS)
                res.kw["int_value"] = f"std::create_int_reference({inner})"
                if self.chance(0.3):  # two references in one resource
                    res.kw["value"] = shared or self.env_ref()
            else:
                others = [x for x in self.resources if x is not res] + \
                    [n for n in self.nodes if n.kind == "agentconfig"]
                if others:
                    fact = self.pick(['"address"', '"port"', '"a b"', '"\\u00e9\\"q\\""', '""'])
                    res.kw["value"] = f"std::create_fact_reference({self.pick(others).ref}, {fact})"

    # ------------------------------------------------------------------ errors
    def inject_error(self):
        top_res = [x for x in self.resources if x.var and "." not in x.ref]
        kinds = ["dup-id-text", "cycle", "self-require", "two-sets", "agentconfig-internal",
                 "agentconfig-ref-agent", "index-conflict", "ref-in-name", "empty-set-name",
                 "requires-string", "subclass-dup", "cycle-through-forward", "fact-of-non-resource",
                 "ref-type-mismatch", "ref-in-set-name"]
        if "ref-type-mismatch" in self.avoid:
            kinds.remove("ref-type-mismatch")
        kind = self.pick(kinds)
        if kind == "dup-id-text":
            self.top.append([f'{NULL}(agentname="zz,name=q", name="w")'])
            self.top.append([f'{NULL}(agentname="zz", name="q,name=w")'])
        elif kind == "cycle":
            live = [e for e in self.edges if e[0].kind == "res" and e[1].kind == "res"]
            if live:
                a, b = self.pick(live)
                self.top.append([f"{b.ref}.requires += {a.ref}"])
            elif len(top_res) >= 2:
                a, b = top_res[:2]
                self.top.append([f"{a.ref}.requires += {b.ref}", f"{b.ref}.requires += {a.ref}"])
        elif kind == "self-require" and top_res:
            x = self.pick(top_res)
            self.top.append([f"{x.ref}.{self.pick(['requires', 'provides'])} += {x.ref}"])
        elif kind == "two-sets" and top_res:
            x = self.pick(top_res)
            self.top.append([f'std::ResourceSet(name="dup-a", resources=[{x.ref}])'])
            self.top.append([f'std::ResourceSet(name="dup-b", resources=[{x.ref}])'])
        elif kind == "agentconfig-internal":
            self.top.append(['std::AgentConfig(agentname="internal", autostart=true)'])
        elif kind == "agentconfig-ref-agent":
            self.top.append(['std::AgentConfig(agentname="refagent", agent=std::create_environment_reference("A"))'])
        elif kind == "index-conflict":
            self.top.append([f'{NULL}(name="conflict", value="one")'])
            self.top.append([f'{NULL}(name="conflict", value="two")'])
        elif kind == "ref-in-name":
            self.top.append([f'{NULL}(name=std::create_environment_reference("N"))'])
        elif kind == "empty-set-name":
            self.top.append([f'std::ResourceSet(name="{self.pick(["", " "])}", resources=[])'])
        elif kind == "requires-string" and top_res:
            self.top.append([f'{self.pick(top_res).ref}.requires += "text"'])
        elif kind == "subclass-dup" and self.subclasses:
            sub = self.pick(self.subclasses)[0]
            self.top.append([f'{sub}(name="same", agentname="dupagent")'])
            self.top.append([f'{NULL}(name="same", agentname="dupagent")'])
        elif kind == "fact-of-non-resource":
            others = [n for n in self.nodes if n.kind in ("group", "stack", "service")]
            if not others or not top_res:
                return None
            self.pick(top_res).kw["value"] = f'std::create_fact_reference({self.pick(others).ref}, "f")'
        elif kind == "ref-type-mismatch" and top_res:
            field, ref = self.pick([("fail", 'std::create_environment_reference("F")'),
                                    ("int_value", 'std::create_environment_reference("I")'),
                                    ("value", "std::create_int_reference(3)")])
            self.pick(top_res).kw[field] = ref
        elif kind == "ref-in-set-name":
            self.top.append([f"std::ResourceSet(name={self.env_ref()})"])
        elif kind == "cycle-through-forward":
            live = [e for e in self.edges if e[0].live and e[1].live and (e[0].kind != "res" or e[1].kind != "res")]
            if not live:
                return None
            a, b = self.pick(live)
            self.top.append([f"{b.ref}.requires += {a.ref}"])
        else:
            return None
        return kind

    # ------------------------------------------------------------------ driver
    def render_resource(self, node: Node):
        text = f"{node.typ}({self.kwtext(node.kw)})"
        if len(text) > 100 and self.chance(0.5):
            inner = ",\n".join("    " + f"{k}={v}" for k, v in node.kw.items())
            text = f"{node.typ}(\n{inner},\n)"
        return [f"{node.var} = {text}"] if node.var else [text]

    def generate(self, error_rate=0.12) -> str:
        out_head = ["import std::testing", ""]
        if self.ok("subclasses", 0.45):
            self.gen_subclasses()
        has_services = self.ok("services", 0.45)
        has_stacks = self.ok("stacks", 0.35)
        has_groups = self.ok("groups", 0.35)
        if has_services:
            self.gen_service_defs()
        if has_stacks:
            self.gen_stack_defs()
        if has_groups:
            self.gen_group_defs()
        goal = self.r.randint(5, 40)
        res_nodes = []
        guard = 0
        while self.n_resources < goal and guard < 200:
            guard += 1
            roll = self.r.random()
            if has_services and roll < 0.15:
                self.add_service()
            elif roll < 0.22 and "loops" not in self.avoid:
                self.add_loop()
            elif has_stacks and roll < 0.27:
                self.add_stack()
            elif has_groups and roll < 0.31:
                self.add_group()
            else:
                typ = NULL
                if self.subclasses and self.chance(0.3):
                    typ = self.pick(self.subclasses)[0]
                res_nodes.append(self.add_resource(typ))
        if self.ok("agentconfig", 0.3):
            for _ in range(self.r.randint(1, 2)):
                self.add_agentconfig()
        self.gen_edges()
        if self.ok("references", 0.35):
            self.gen_references()
        if self.ok("sets", 0.35):
            self.gen_sets()
        if self.ok("merge", 0.12) and res_nodes:
            # the same constructor again (same index key, same fields: the same instance),
            # possibly with requires of its own, which add up
            x = self.pick(res_nodes)
            kw = {k: v for k, v in x.kw.items() if "create_" not in v}
            if len(kw) == len(x.kw):
                others = [o for o in res_nodes if o.lo < x.lo]
                if others and self.chance(0.5):
                    kw["requires"] = self.pick(others).ref
                self.top.append([f"{x.typ}({self.kwtext(kw)})"])
        if self.chance(error_rate):
            kinds = [self.inject_error() for _ in range(2 if self.chance(0.25) else 1)]
            self.error_kind = ",".join(k for k in kinds if k) or None
        self.render_edges()
        for node in res_nodes:
            self.top.append(self.render_resource(node))
        # nodes whose constructor gained keywords from edges after they were rendered
        for node in self.nodes:
            if node.kind in ("stack", "group") and ("requires" in node.kw or "provides" in node.kw):
                ctor = "Stack" if node.kind == "stack" else node.typ
                for stmt in self.top:
                    if stmt[0].startswith(f"{node.var} = {ctor}("):
                        stmt[0] = f"{node.var} = {ctor}({self.kwtext(node.kw)})"
        if "shuffle" not in self.avoid and self.chance(0.5):
            self.r.shuffle(self.top)
        body = [line for stmt in self.top for line in stmt]
        text = "\n".join(body)
        pre = ["n = 7"] if self.special or "=n" in text else []
        if "agent_var" in text:
            pre.append('agent_var = "interp-agent"')
        lines = out_head + self.defs + pre + ([""] if pre else []) + body
        return "\n".join(lines) + "\n"


def generate_model(seed: int, index: int, avoid=frozenset()) -> tuple[str, str | None]:
    rng = random.Random(f"export-fuzz:{seed}:{index}")
    gen = ExportGen(rng, avoid)
    text = gen.generate()
    return text, gen.error_kind


# --------------------------------------------------------------------------------------------
# Running weft and the reference, comparing
# --------------------------------------------------------------------------------------------


def run_weft(weft: str, case: Path, timeout=120) -> dict:
    """weft's export of a case: {"status", "kind", "message", "resources", "warnings"}."""
    out = case / WEFT_OUT
    out.unlink(missing_ok=True)
    try:
        cp = subprocess.run([weft, "export", "--error-format", "json", "-o", str(out), str(case)],
                            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"status": "error", "kind": "<timeout>", "message": "", "resources": [], "warnings": 0}
    kind = message = None
    warnings = 0
    for d in evalfuzz.json_diagnostics(cp.stderr):
        if d.get("severity") == "error" and kind is None:
            kind, message = d.get("kind"), d.get("message", "")
        elif d.get("severity") == "warning" and "resource" in d.get("message", "").lower():
            warnings += 1
    if kind is None and cp.returncode != 0:
        kind, message = f"<crash rc={cp.returncode}>", cp.stderr.strip()[-400:]
    if kind is None and not out.exists():
        kind, message = "<no output>", ""
    if kind is not None:
        return {"status": "error", "kind": kind, "message": message, "resources": [], "warnings": warnings}
    resources = json.loads(out.read_text(encoding="utf-8"))
    return {"status": "ok", "kind": None, "message": None, "resources": oracle.normalize_resources(resources),
            "warnings": warnings}


def run_reference(case: Path, venv: Path, timeout: float = 300) -> str | None:
    """Records <case>/expect-export.json with export-oracle.py; a problem as text, or None."""
    (case / EXPECT).unlink(missing_ok=True)
    try:
        res = oracle.run_case(case, venv, timeout)
    except Exception as e:  # keep going
        return f"oracle failure: {e!r}"
    if res["expect"] is None:
        return "; ".join(res["problems"])
    try:
        text = oracle.dump(res["expect"])
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a "\\ud83d" escape in the model)
        public = {k: v for k, v in res["expect"].items() if not k.startswith("_")}
        text = json.dumps(public, indent=2, ensure_ascii=True) + "\n"
    (case / EXPECT).write_text(text, encoding="utf-8")
    return None


def describe_difference(got: list, want: list) -> list[str]:
    """As describe_difference of tests/tests/export.rs: missing/extra ids, differing fields."""
    g = {r.get("id"): r for r in got}
    w = {r.get("id"): r for r in want}
    lines = []
    for rid, res in w.items():
        mine = g.get(rid)
        if mine is None:
            lines.append(f"missing: {rid}")
        elif mine != res:
            for key in sorted(set(mine) | set(res)):
                if mine.get(key) != res.get(key):
                    lines.append(f"{rid}: {key}: weft {json.dumps(mine.get(key))} reference {json.dumps(res.get(key))}")
    lines += [f"extra: {rid}" for rid in g if rid not in w]
    if not lines and got != want:
        lines.append("same resources by id, but the lists differ (repeated ids?)")
    return lines


def mismatch(expect: dict, actual: dict) -> list[str] | None:
    """The rule of tests/tests/export.rs `compare`; the differences as lines, or None."""
    if expect["status"] == "error":
        want = (expect.get("error") or {}).get("kind")
        if actual["status"] != "error":
            return [f"status: reference error {want}, weft ok"]
        if actual["kind"] != want:
            return [f"kind: reference {want}, weft {actual['kind']} ({(actual['message'] or '')[:200]})"]
        return None
    if actual["status"] != "ok":
        return [f"status: reference ok, weft error {actual['kind']}: {(actual['message'] or '')[:300]}"]
    want = oracle.normalize_resources(expect["resources"])
    if actual["resources"] == want:
        return None
    return describe_difference(actual["resources"], want)


def signature(expect: dict, actual: dict) -> str | None:
    """The kind of a disagreement, kept while reducing."""
    diff = mismatch(expect, actual)
    if diff is None:
        return None
    ref = expect["status"] + ":" + str((expect.get("error") or {}).get("kind"))
    mine = actual["status"] + ":" + str(actual["kind"])
    shape = set()
    for line in diff:
        if line.startswith(("missing:", "extra:", "status:", "kind:")):
            shape.add(line.split(":", 1)[0])
        elif ": " in line:
            shape.add("field " + line.split(": ")[1])
    return f"{ref}|{mine}|{','.join(sorted(shape))}"


def describe_expect(e: dict) -> str:
    if e["status"] == "ok":
        return f"ok, {len(e['resources'])} resources, {len(e['warnings'])} warnings"
    return f"error {e['error']['kind']}: {e['error']['message'][:200]}"


def describe_actual(a: dict) -> str:
    if a["status"] == "ok":
        return f"ok, {len(a['resources'])} resources, {a['warnings']} warnings"
    return f"error {a['kind']}: {(a['message'] or '')[:200]}"


def default_venv() -> Path:
    return oracle.default_venv()


# --------------------------------------------------------------------------------------------
# Reduction
# --------------------------------------------------------------------------------------------


def reduce_case(case: Path, out: Path, weft: str, venv: Path, jobs: int) -> int:
    """Greedy reduction: removes top-level items, then statements inside blocks, keeping a
    candidate while the reference and weft still disagree the same way (`signature`)."""
    expect = json.loads((case / EXPECT).read_text())
    target = signature(expect, run_weft(weft, case))
    if target is None:
        print("the case does not disagree")
        return 1
    print(f"reducing {case}: {target}", flush=True)
    lines = (case / "main.cf").read_text().split("\n")
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    weft_side = target.split("|")[1]
    runs = 0

    def try_batch(cands):
        nonlocal runs
        keep = []
        for k, cand in enumerate(cands):
            d = work / f"cand{k}"
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            (d / "main.cf").write_text("\n".join(cand))
            a = run_weft(weft, d)
            if a["status"] + ":" + str(a["kind"]) == weft_side:  # weft first: cheap
                keep.append((k, d, a))
        if not keep:
            return None
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            problems = list(pool.map(lambda item: run_reference(item[1], venv), keep))
        runs += len(keep)
        for (k, d, a), problem in zip(keep, problems):
            if problem is None:
                e = json.loads((d / EXPECT).read_text())
                if signature(e, a) == target:
                    return cands[k]
        return None

    lines = evalfuzz.remove_chunks(lines, try_batch, jobs, (0, 1, 2))
    (out / "main.cf").write_text("\n".join(lines))
    print(f"reduced to {len([l for l in lines if l.strip()])} lines after {runs} reference runs: {out / 'main.cf'}")
    return 0


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("/tmp/exportfuzz"))
    ap.add_argument("--weft", default=str(HERE.parent / "target" / "release" / "weft"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--venv", type=Path, default=None)
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--check", nargs="*", type=Path)
    ap.add_argument("--rerun", action="store_true", help="with --check: record the reference's export first")
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--reduce", type=Path, help="reduce this disagreeing case (needs its expect-export.json)")
    ap.add_argument("--warnings", action="store_true", help="note cases whose warning counts differ")
    ap.add_argument("--avoid", default="", help="comma-separated generator features to switch off: "
                    + ", ".join(FEATURES))
    args = ap.parse_args()
    sys.stdout.reconfigure(errors="backslashreplace")
    avoid = frozenset(x for x in args.avoid.split(",") if x)
    unknown = avoid - set(FEATURES)
    if unknown:
        ap.error(f"unknown features: {sorted(unknown)}")
    venv = args.venv or default_venv()

    if args.show:
        text, err = generate_model(args.seed, args.index, avoid)
        print(text, end="")
        print(f"# injected error: {err}", file=sys.stderr)
        return 0
    if not (venv / "bin" / "python").exists() and not args.no_oracle and (args.check is None or args.rerun):
        print(f"reference venv not found at {venv}", file=sys.stderr)
        return 2
    if args.reduce is not None:
        return reduce_case(args.reduce.resolve(), args.out.resolve(), args.weft, venv, args.jobs)

    if args.check is not None:
        cases = [c.resolve() for c in args.check]
        if args.rerun:
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                for case, problem in zip(cases, pool.map(lambda c: run_reference(c, venv), cases)):
                    if problem:
                        print(f"reference: FAILURE {case}: {problem[:400]}")
    else:
        gen_root = args.out / "gen"
        gen_root.mkdir(parents=True, exist_ok=True)
        cases = []
        for i in range(args.count):
            text, err = generate_model(args.seed, i, avoid)
            case = (gen_root / f"case_{args.seed}_{i}").resolve()
            case.mkdir(exist_ok=True)
            (case / "main.cf").write_text(text, encoding="utf-8")
            (case / "injected.txt").unlink(missing_ok=True)
            if err:
                (case / "injected.txt").write_text(err + "\n")
            cases.append(case)
        if not args.no_oracle:
            print(f"running the reference on {len(cases)} cases ...", flush=True)
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                for case, problem in zip(cases, pool.map(lambda c: run_reference(c, venv), cases)):
                    if problem:
                        print(f"reference: FAILURE {case}: {problem[:400]}")

    n_ok = n_err = n_diff = n_missing = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        actuals = dict(zip(cases, pool.map(lambda c: run_weft(args.weft, c), cases)))
    for case in cases:
        exp_file = case / EXPECT
        if not exp_file.exists():
            n_missing += 1
            continue
        try:
            expect = json.loads(exp_file.read_text())
        except ValueError:
            n_missing += 1
            continue
        actual = actuals[case]
        n_ok += expect["status"] == "ok"
        n_err += expect["status"] != "ok"
        diff = mismatch(expect, actual)
        if diff:
            n_diff += 1
            tag = (case / "injected.txt").read_text().strip() if (case / "injected.txt").exists() else None
            print(f"DISAGREE {case}" + (f" (injected: {tag})" if tag else ""))
            print(f"   reference: {describe_expect(expect)}\n   weft:      {describe_actual(actual)}")
            for line in diff[:12]:
                print("   " + line[:400])
            if len(diff) > 12:
                print(f"   ... {len(diff) - 12} more")
        elif args.warnings and expect["status"] == "ok" and len(expect["warnings"]) != actual["warnings"]:
            print(f"NOTE {case}: warnings: reference {len(expect['warnings'])}, weft {actual['warnings']}")
    print(f"SUMMARY {'seed=' + str(args.seed) + ' ' if args.check is None else ''}cases={len(cases)} "
          f"reference_ok={n_ok} reference_error={n_err} no_reference={n_missing} disagreements={n_diff}")
    return 1 if n_diff else 0


if __name__ == "__main__":
    sys.exit(main())
