#!/usr/bin/env bash
# Records tests/realworld/compile-expect.tsv: what the reference compiler (inmanta-core 18.0.1 +
# inmanta-module-std 8.7.5) does with a project whose main.cf is only `import <module>`, for every
# module of tests/realworld/modules.tsv, running the full `inmanta compile`.
#
# The modules are v2 modules, so the reference only finds them when they are installed in the
# Python environment it runs in. This script makes such an environment (once): the reference,
# then every wheel of tests/realworld/.cache/wheels with its dependencies, constrained to the
# reference's core and std versions. postgresql is installed without its dependencies, because
# it requires inmanta-module-systemd, which is not on PyPI; the compile then fails loading that
# module, which is the outcome modules.tsv records.
#
# Each project is compiled by the conformance oracle (/work/shared/tools/oracle.py, or
# $WEFT_ORACLE), whose expect.json files are turned into one TSV line per module:
#     <module> TAB ok
#     <module> TAB error TAB <kind> TAB <line|-> TAB <file relative to site-packages|->
#
# Usage: tools/realworld-compile-oracle.sh [VENV] > tests/realworld/compile-expect.tsv
# VENV defaults to ${XDG_CACHE_HOME:-~/.cache}/inmanta-ref/realworld-venv. The wheels must have
# been fetched (any test of tests/tests/realworld.rs does it, or tests/realworld/fetch.py).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REALWORLD="$ROOT/tests/realworld"
WHEELS="$REALWORLD/.cache/wheels"
VENV="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/inmanta-ref/realworld-venv}"
ORACLE="${WEFT_ORACLE:-/work/shared/tools/oracle.py}"

[ -d "$WHEELS" ] || { echo "no wheels in $WHEELS: run tests/realworld/fetch.py first" >&2; exit 1; }
if [ ! -x "$VENV/bin/inmanta" ]; then
  PY=""
  for c in python3.12 python3.13 python3; do
    if "$c" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then PY="$c"; break; fi
  done
  [ -n "$PY" ] || { echo "need python >= 3.12" >&2; exit 1; }
  "$PY" -m venv "$VENV"
  constraints="$(mktemp)"
  printf 'inmanta-core==18.0.1\ninmanta-module-std==8.7.5\n' > "$constraints"
  "$VENV/bin/pip" install -q "inmanta-core==18.0.1" "inmanta-module-std==8.7.5" >&2
  "$VENV/bin/pip" install -q -c "$constraints" $(ls "$WHEELS"/*.whl | grep -v postgresql) >&2
  "$VENV/bin/pip" install -q --no-deps "$WHEELS"/inmanta_module_postgresql-*.whl >&2
  rm -f "$constraints"
fi

cases="$(mktemp -d)"
trap 'rm -rf "$cases"' EXIT
for module in $(grep -v '^#' "$REALWORLD/modules.tsv" | cut -f1); do
  mkdir -p "$cases/$module"
  echo "import $module" > "$cases/$module/main.cf"
done
python3 "$ORACLE" --venv "$VENV" --jobs 2 --timeout 300 --quiet "$cases" >&2

python3 - "$cases" <<'EOF'
import json, sys
from pathlib import Path
cases = Path(sys.argv[1])
print("# module\toutcome of the reference's full `inmanta compile` (inmanta-core 18.0.1, std 8.7.5) of a project whose")
print("# main.cf is `import <module>`, the modules installed as v2 modules; recorded with tools/realworld-compile-oracle.sh:")
print("# ok, or error <kind> <line|-> <file relative to site-packages|->. No project prints anything.")
for case in sorted(p for p in cases.iterdir() if p.is_dir()):
    expect = json.loads((case / "expect.json").read_text())
    if expect["prints"]:
        sys.exit(f"{case.name}: the reference printed {expect['prints']}; the test expects no prints")
    error = expect["error"]
    if error is None:
        print(f"{case.name}\tok")
        continue
    line = "-" if error["line"] is None else error["line"]
    file = (error["file"] or "-").removeprefix("<site-packages>/")
    print(f"{case.name}\terror\t{error['kind']}\t{line}\t{file}")
EOF
