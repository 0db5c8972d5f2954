#!/usr/bin/env python3
"""Export oracle: (re)record what the reference compiler's `inmanta export -j FILE` writes, for
the export test cases, normalized so that it can be compared with `weft export`.

Reference: inmanta-core 18.0.1 + inmanta-module-std 8.7.5 (see /work/shared/tools/reference-setup.sh
or the `reference-setup.sh` of the conformance tooling for how to install it in a venv).

A case is a directory holding main.cf, optionally libs/<module>/... (v1 modules) and optionally its
own project.yml. For each case the oracle copies it into a fresh temporary directory, adds this
project.yml when the case has none:

    name: case
    modulepath: libs
    downloadpath: libs
    repo: []
    install_mode: release

and runs `inmanta -q export -j <tmp>/out.json` there, through a tiny driver (DRIVER below) run
with the venv's python: it calls the real CLI entry point (inmanta.app.app) and only hooks the
final summary step, where the export command holds the exception it ended with, to record that
exception's class. It then writes <case>/expect-export.json:

    {"status": "ok" | "error",
     "error": null | {"kind": <exception class name; of the first cause for a MultiException>,
                      "message": <first line of the message, temp path replaced by ".">},
     "warnings": [<WARNING log lines of the reference that mention resources, cleaned, sorted>],
     "resources": [<the exported objects, normalized>]}

The reference runs with PYTHONHASHSEED=2 unless the environment sets it: its field order, and so
some outcomes, depend on the hash seed (see run_project).
Normalization of `resources`: sorted by "id"; every object's keys sorted (recursively); each
"requires" list sorted; and, because the reference iterates the fields of a resource in a
hash-seed dependent order, each "references" list is sorted by the reference's "id" and each
"mutators" list by its canonical JSON text. For an error, `resources` is what out.json holds
([] when the reference wrote nothing; on a compile error it writes []).

Cleaning of messages and warnings: the temporary project path becomes ".", the venv's
site-packages "<site-packages>", other temporary paths "<tmp>", and memory addresses (str() of
an instance: "@__config__::G 7fb92bb8b250") "<addr>". A warning is kept when its log line has
level WARNING and its text mentions "resource" (case-insensitive); only the message text is
kept (not the logger name). The list is sorted, as the reference emits it in instance order.

Generated models (--gen-hosts): the project is generated with benches/gen_model.py
(`--hosts N --flavor resources`) into a temporary directory and its normalized export (same
format) is written to <gen-out>/hosts-N.expect.json (default gen-out:
tests/fixtures/export-gen/). The model itself is not stored; the test regenerates it.

Venvs: cases run in the reference venv (--venv DIR, else $INMANTA_REF_VENV, else
${XDG_CACHE_HOME:-~/.cache}/inmanta-ref/venv). The modules fs, exec and mitogen are not in
that venv, so a case whose .cf files (main.cf or libs/) import fs, exec or mitogen is run in
the venv given by --modules-venv DIR (else $INMANTA_MODULES_VENV): the reference venv plus
the public modules, e.g.
    python3.12 -m venv DIR
    DIR/bin/pip install inmanta-core==18.0.1 inmanta-module-std==8.7.5 \\
        inmanta-module-fs==1.2.0 inmanta-module-exec==2.1.1 inmanta-module-mitogen==0.2.5
The recorded cases were made with --modules-venv /tmp/rwvenv (fs 1.2.0, exec 2.1.1,
mitogen 0.2.5). Without a modules venv such cases are reported as failures.

Usage:
  export-oracle.py [options] CASE_OR_ROOT ...   record expect-export.json of the given cases
                                                (a root is searched for case directories)
  export-oracle.py --gen-hosts 1,4,16           record the generated models
  options:
    --check               write nothing; report cases whose result differs from the recorded one
    --jobs N              parallel cases (default: min(2, number of CPUs))
    --timeout S           per case, seconds (default 300)
    --venv DIR            the reference venv
    --modules-venv DIR    the venv for cases importing fs/exec/mitogen
    --gen-hosts LIST      comma-separated host counts for generated models
    --gen-out DIR         where the generated models' expectations go
    --quiet               only print the summary

Exit status: 1 on failures (timeout, no result recorded, exit status not matching the result,
missing modules venv) or, with --check, differences; 2 on bad usage; 0 otherwise.
Only the Python standard library is used.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPECT = "expect-export.json"
DEFAULT_GEN_OUT = HERE.parent / "tests" / "fixtures" / "export-gen"
GEN_MODEL = HERE.parent / "benches" / "gen_model.py"

PROJECT_YML = """name: case
modulepath: libs
downloadpath: libs
repo: []
install_mode: release
"""

# Modules that are only in the modules venv.
EXTRA_MODULES = ("fs", "exec", "mitogen")
IMPORT_RE = re.compile(r"^\s*import\s+(%s)(?:::|\s|$)" % "|".join(EXTRA_MODULES), re.MULTILINE)

# Runs inside the venv's python, with the temporary project as working directory: the real
# `inmanta -q export -j FILE` command (inmanta.app.app), with the final summary step hooked to
# record the exception the command ended with and the stage that raised it.
DRIVER = r'''
import json, os, sys
import inmanta.app as app_mod
from inmanta.ast import CompilerException

RESULT = os.environ["EXPORT_ORACLE_RESULT_FILE"]

def message_of(exc):
    if isinstance(exc, CompilerException):
        return exc.get_message()
    return str(exc)

orig = app_mod.CompileSummaryReporter.print_summary_and_exit

def hooked(self, show_stack_traces):
    res = {"exception": None}
    exc, stage = None, None
    if self.compiler_exception.has_exception():
        exc, stage = self.compiler_exception.exception, "compile"
    elif self.exporter_exception.has_exception():
        exc, stage = self.exporter_exception.exception, "export"
    if exc is not None:
        # Several end-of-compile errors are one MultiException; it is described by its first
        # cause, as ../shared/tools/oracle.py describes it and as weft reports the first error.
        from inmanta.ast import MultiException
        if isinstance(exc, MultiException) and exc.get_causes():
            exc = exc.get_causes()[0]
        try:
            message = message_of(exc)
        except Exception as e:  # never lose the result because of the message
            message = "message failed: %r" % (e,)
        res["exception"] = {"kind": type(exc).__name__, "module": type(exc).__module__,
                            "stage": stage, "message": message}
    with open(RESULT, "w") as fh:
        json.dump(res, fh)
    orig(self, show_stack_traces)

app_mod.CompileSummaryReporter.print_summary_and_exit = hooked
sys.argv = ["inmanta", "-q", "export", "-j", sys.argv[1]]
app_mod.app()
'''

# memory addresses (str() of an entity instance: "__config__::Host 7f6792897010")
ADDRESS_RE = re.compile(r"(?<=[A-Za-z0-9_] )(0x)?[0-9a-f]{9,16}\b|\b0x[0-9a-f]{6,16}\b")
# a log line of the reference: "<logger name> <spaces> WARNING <message>"
WARNING_RE = re.compile(r"^\S+\s+WARNING\s+(.*)$")


def default_venv() -> Path:
    env = os.environ.get("INMANTA_REF_VENV")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "inmanta-ref" / "venv"


def find_cases(paths: list[Path]) -> list[Path]:
    cases: set[Path] = set()
    for p in paths:
        p = p.resolve()
        if (p / "main.cf").is_file():
            cases.add(p)
            continue
        for main in p.rglob("main.cf"):
            if "libs" in main.relative_to(p).parts:
                continue
            cases.add(main.parent)
    return sorted(cases)


def needs_modules_venv(case: Path) -> bool:
    """Whether a .cf file of the case imports a module that only the modules venv has."""
    for cf in sorted(case.rglob("*.cf")):
        if IMPORT_RE.search(cf.read_text(encoding="utf-8", errors="replace")):
            return True
    return False


class Sanitizer:
    """Removes machine specific absolute paths and memory addresses from texts."""

    def __init__(self, project: Path, venv: Path) -> None:
        self.repl: list[tuple[str, str]] = []
        for base in (project, project.resolve()):
            self.repl.append((str(base) + os.sep, "./"))
            self.repl.append((str(base), "."))
        for cand in sorted((venv / "lib").glob("python3*/site-packages")):
            self.repl.append((str(cand.resolve()), "<site-packages>"))
            self.repl.append((str(cand), "<site-packages>"))
        self.repl.append((str(venv.resolve()), "<venv>"))
        self.repl.append((str(venv), "<venv>"))
        self.repl.append((tempfile.gettempdir(), "<tmp>"))
        home = os.path.expanduser("~")
        if home and home != "/":
            self.repl.append((home, "~"))

    def text(self, s: str) -> str:
        for a, b in self.repl:
            if a:
                s = s.replace(a, b)
        return ADDRESS_RE.sub("<addr>", s)


def canonical(value):
    """A copy of a JSON value with every object's keys sorted."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def normalize_resources(resources: list) -> list:
    out = []
    for res in resources:
        res = canonical(res)
        if isinstance(res.get("requires"), list):
            res["requires"] = sorted(res["requires"])
        if isinstance(res.get("references"), list):
            res["references"] = sorted(res["references"], key=lambda r: str(r.get("id")))
        if isinstance(res.get("mutators"), list):
            res["mutators"] = sorted(res["mutators"], key=lambda m: json.dumps(m, sort_keys=True))
        out.append(res)
    return sorted(out, key=lambda r: str(r.get("id")))


def warnings_of(output: str, sanitizer: Sanitizer) -> list[str]:
    found = []
    for line in output.splitlines():
        m = WARNING_RE.match(line.rstrip())
        if m and "resource" in m.group(1).lower():
            found.append(sanitizer.text(m.group(1)).rstrip())
    return sorted(found)


def run_project(proj: Path, venv: Path, timeout: float) -> dict:
    """Runs the export in the prepared project directory `proj` (which it may modify).
    Returns {"expect": {...} or None, "problems": [str], "stderr": str}."""
    python = venv / "bin" / "python"
    if not (proj / "project.yml").exists():
        (proj / "project.yml").write_text(PROJECT_YML)
    (proj / "libs").mkdir(exist_ok=True)
    work = proj.parent
    result_file = work / "result.json"
    out_file = work / "out.json"
    env = dict(os.environ)
    env["EXPORT_ORACLE_RESULT_FILE"] = str(result_file)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["COLUMNS"] = "80"
    # The reference maps a resource's fields in the order of a Python set
    # (`tuple(set(fields))` in inmanta.resources), which changes with the hash seed: which of
    # two failing fields is reported, and whether a resource with `managed=false` is dropped
    # before one of its fields fails, differ from run to run. A fixed seed makes a recording
    # reproducible; with seed 2 the fields that ignore a resource (`managed`, `autostart`)
    # come first, which is what weft does. PYTHONHASHSEED in the environment overrides it.
    env.setdefault("PYTHONHASHSEED", "2")
    for var in ("INMANTA_CONFIG_ENVIRONMENT", "INMANTA_REMOVED_SET_ID"):
        env.pop(var, None)
    sanitizer = Sanitizer(proj, venv)
    try:
        cp = subprocess.run(
            [str(python), "-c", DRIVER, str(out_file)],
            cwd=proj,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"expect": None, "problems": [f"timeout after {timeout}s"], "stderr": ""}
    output = sanitizer.text(cp.stdout + "\n" + cp.stderr)
    if not result_file.exists():
        tail = "\n".join(output.strip().splitlines()[-8:])
        return {"expect": None, "problems": [f"no result recorded (rc={cp.returncode}); output tail:\n{tail}"],
                "stderr": output}
    res = json.loads(result_file.read_text())
    resources = json.loads(out_file.read_text(encoding="utf-8")) if out_file.exists() else []
    exc = res.get("exception")
    if exc is None:
        if cp.returncode != 0:
            return {"expect": None, "problems": [f"no exception recorded but rc={cp.returncode}"], "stderr": output}
        error = None
    else:
        if cp.returncode == 0:
            return {"expect": None, "problems": ["exception recorded but rc=0"], "stderr": output}
        msg = sanitizer.text(exc.get("message") or "")
        first = msg.strip("\n").split("\n")[0].rstrip() if msg.strip() else ""
        error = {"kind": exc["kind"], "message": first}
    expect = {
        "status": "ok" if error is None else "error",
        "error": error,
        "warnings": warnings_of(cp.stdout + "\n" + cp.stderr, sanitizer),
        "resources": normalize_resources(resources),
        # not written: for the report only
        "_stage": exc.get("stage") if exc else None,
    }
    return {"expect": expect, "problems": [], "stderr": output}


def run_case(case: Path, venv: Path, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="export-oracle-") as tmp:
        proj = Path(tmp) / "case"
        shutil.copytree(case, proj, ignore=shutil.ignore_patterns(EXPECT, "expect.json", ".cfcache", "__pycache__"))
        return run_project(proj, venv, timeout)


def run_generated(hosts: int, venv: Path, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="export-oracle-gen-") as tmp:
        proj = Path(tmp) / "case"
        cp = subprocess.run(
            [sys.executable, str(GEN_MODEL), "--hosts", str(hosts), "--flavor", "resources", str(proj)],
            capture_output=True, text=True,
        )
        if cp.returncode != 0:
            return {"expect": None, "problems": [f"gen_model.py failed: {cp.stderr.strip()}"], "stderr": cp.stderr}
        return run_project(proj, venv, timeout)


def dump(expect: dict) -> str:
    public = {k: v for k, v in expect.items() if not k.startswith("_")}
    return json.dumps(public, indent=2, ensure_ascii=False) + "\n"


def display_name(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return "/".join(path.parts[-2:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", type=Path, help="case directories or roots to scan")
    ap.add_argument("--venv", type=Path, default=None)
    ap.add_argument("--modules-venv", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=300.0, help="per case, seconds (default 300)")
    ap.add_argument("--jobs", "-j", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--check", action="store_true", help="compare with the recorded files, write nothing")
    ap.add_argument("--gen-hosts", default=None, help="comma-separated host counts of generated models")
    ap.add_argument("--gen-out", type=Path, default=DEFAULT_GEN_OUT)
    ap.add_argument("--quiet", "-q", action="store_true")
    args = ap.parse_args()

    venv = args.venv or default_venv()
    if not (venv / "bin" / "python").exists():
        print(f"reference venv not found at {venv}; see reference-setup.sh", file=sys.stderr)
        return 2
    modules_venv = args.modules_venv or (Path(os.environ["INMANTA_MODULES_VENV"])
                                         if os.environ.get("INMANTA_MODULES_VENV") else None)
    if modules_venv is not None and not (modules_venv / "bin" / "python").exists():
        print(f"modules venv not found at {modules_venv}", file=sys.stderr)
        return 2

    # jobs: (display name, target file, callable)
    jobs: list[tuple[str, Path, object]] = []
    failed: list[tuple[str, list[str]]] = []
    cases = find_cases(args.paths) if args.paths else []
    if args.paths and not cases:
        print("no cases found", file=sys.stderr)
        return 2
    for case in cases:
        case_venv = venv
        if needs_modules_venv(case):
            if modules_venv is None:
                failed.append((display_name(case), [f"imports one of {', '.join(EXTRA_MODULES)}: give --modules-venv"]))
                continue
            case_venv = modules_venv
        jobs.append((display_name(case), case / EXPECT,
                     lambda c=case, v=case_venv: run_case(c, v, args.timeout)))
    if args.gen_hosts:
        try:
            counts = [int(x) for x in args.gen_hosts.split(",") if x.strip()]
        except ValueError:
            print("--gen-hosts takes comma-separated integers", file=sys.stderr)
            return 2
        for n in counts:
            jobs.append((f"generated hosts={n}", args.gen_out / f"hosts-{n}.expect.json",
                         lambda n=n: run_generated(n, venv, args.timeout)))
    if not jobs and not failed:
        print("give one or more case directories or roots, or --gen-hosts", file=sys.stderr)
        return 2

    differs: list[str] = []
    tally = {"ok": 0, "error": 0}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(fn): (name, target) for name, target, fn in jobs}
        for fut in concurrent.futures.as_completed(futs):
            name, target = futs[fut]
            try:
                out = fut.result()
            except Exception as e:  # oracle bug, keep going
                out = {"expect": None, "problems": [f"oracle failure: {e!r}"], "stderr": ""}
            expect = out["expect"]
            if expect is None:
                failed.append((name, out["problems"]))
                continue
            tally[expect["status"]] += 1
            if args.check:
                old = target.read_text(encoding="utf-8") if target.exists() else None
                if old != dump(expect):
                    differs.append(name)
                    if not args.quiet:
                        print(f"DIFF {name}")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(dump(expect), encoding="utf-8")
            if not args.quiet:
                e = expect["error"]
                tag = f"ok, {len(expect['resources'])} resources" if e is None else \
                    f"error ({expect['_stage']}) {e['kind']}: {e['message']}"
                warn = f", {len(expect['warnings'])} warning(s)" if expect["warnings"] else ""
                print(f"{name}: {tag}{warn}")

    total = tally["ok"] + tally["error"] + len(failed)
    print(f"\n{total} cases: {tally['ok']} ok, {tally['error']} error, {len(failed)} failures"
          + (f", {len(differs)} differ" if args.check else ""))
    for name, problems in sorted(failed):
        print(f"FAILURE (nothing written): {name}")
        for p in problems:
            print("   " + p.replace("\n", "\n   "))
    for name in sorted(differs):
        print(f"DIFFERS: {name}")
    return 1 if failed or differs else 0


if __name__ == "__main__":
    sys.exit(main())
