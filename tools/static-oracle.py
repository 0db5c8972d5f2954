"""Records what the reference compiler reports *before it executes anything* for each case.

`weft check` must report exactly what the reference's static phase reports: loading, parsing,
type definition and normalisation (spec section 3.1, steps 1 to 3). This script runs the real
`inmanta compile` on each case with the scheduler stopped right after that phase, and prints a
TSV line per case:

    <area>/<case> <TAB> ok                       no error before execution
    <area>/<case> <TAB> error <kind> <line|->    the first error the static phase raised

Usage: static-oracle.py CORPUS_DIR [--venv DIR] > tests/conformance/static-expect.tsv
The venv defaults to the one tools/reference-setup installs (~/.cache/inmanta-ref/venv).
"""
import os, sys, shutil, subprocess, tempfile, json
from pathlib import Path
VENV = Path(os.environ.get("INMANTA_REF_VENV", os.path.expanduser("~/.cache/inmanta-ref/venv")))
if "--venv" in sys.argv:
    i = sys.argv.index("--venv")
    VENV = Path(sys.argv[i + 1])
    del sys.argv[i:i + 2]
DRIVER = r'''
import sys, json, os
import inmanta.app as app_mod
from inmanta.execute import scheduler as S
from inmanta.ast import CompilerException, MultiException
class StopStatic(Exception): pass
orig_run = S.Scheduler.run
def run(self, compiler, statements, blocks):
    try:
        self.define_types(compiler, statements, blocks)
        self._set_precedence_rules_on_relationship_attributes()
    except BaseException as e:
        exc = e
        if isinstance(e, MultiException): exc = e.get_causes()[0]
        loc = exc.get_location() if isinstance(exc, CompilerException) else None
        print("RESULT STATIC %s %s" % (type(exc).__name__, getattr(loc, "lnr", None)), file=sys.__stderr__)
        os._exit(0)
    print("RESULT STATIC_OK", file=sys.__stderr__)
    os._exit(0)
S.Scheduler.run = run
orig = app_mod.CompileSummaryReporter.print_summary_and_exit
def hooked(self, *a, **k):
    exc = self.compiler_exception.exception if self.compiler_exception.has_exception() else None
    if exc is not None:
        if isinstance(exc, MultiException): exc = exc.get_causes()[0]
        loc = exc.get_location() if isinstance(exc, CompilerException) else None
        print("RESULT STATIC %s %s" % (type(exc).__name__, getattr(loc, "lnr", None)), file=sys.__stderr__)
    os._exit(0)
app_mod.CompileSummaryReporter.print_summary_and_exit = hooked
sys.argv = ["inmanta", "compile"]
app_mod.app()
'''
PY = "name: case\nmodulepath: libs\ndownloadpath: libs\nrepo: []\ninstall_mode: release\n"
def one(case):
    with tempfile.TemporaryDirectory() as t:
        p = Path(t) / "case"
        shutil.copytree(case, p, ignore=shutil.ignore_patterns("expect.json"))
        (p / "project.yml").write_text(PY); (p / "libs").mkdir(exist_ok=True)
        cp = subprocess.run([str(VENV / "bin/python"), "-c", DRIVER], cwd=p, capture_output=True, text=True, timeout=120)
        lines = [l for l in cp.stderr.splitlines() if l.startswith("RESULT ")]
        return lines[-1][7:] if lines else "NORESULT " + cp.stderr[-300:]
def to_tsv(result: str) -> str:
    if result == "STATIC_OK":
        return "ok"
    parts = result.split()
    if parts[0] == "STATIC" and len(parts) == 3:
        return f"error\t{parts[1]}\t{'-' if parts[2] == 'None' else parts[2]}"
    raise SystemExit(f"unexpected oracle result: {result}")

import concurrent.futures as cf
root = Path(sys.argv[1])
cases = sorted({m.parent for m in root.rglob("main.cf") if "libs" not in m.relative_to(root).parts})
print("# case\tstatic outcome of the reference (inmanta-core 18.0.1): ok, or error <kind> <line>")
with cf.ThreadPoolExecutor(4) as ex:
    for c, r in zip(cases, ex.map(one, cases)):
        print(f"{c.relative_to(root)}\t{to_tsv(r)}")
