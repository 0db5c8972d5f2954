#!/usr/bin/env bash
# Compiles one generated model with weft and with the reference compiler, side by side, and
# prints wall time, CPU time and peak RSS of each.
#
#   benches/compare-reference.sh [HOSTS] [FLAVOR]      (defaults: 5000 pure)
#
# The reference is the `inmanta` of the venv made by ../shared/tools/reference-setup.sh
# (override with INMANTA=/path/to/inmanta). Without it, only weft runs.
set -euo pipefail

hosts="${1:-5000}"
flavor="${2:-pure}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 "$root/benches/gen_model.py" --hosts "$hosts" --flavor "$flavor" "$work/model" >/dev/null
lines=$(cat "$work/model"/*.cf | wc -l)
echo "model: gen_model.py --hosts $hosts --flavor $flavor ($lines lines of main.cf)"

cargo build --release -q -p weft-cli --manifest-path "$root/Cargo.toml"
weft="$root/target/release/weft"

measure() { # label, command...
    local label="$1"; shift
    local out="$work/time.$label"
    if /usr/bin/time -f '%e %U %S %M' -o "$out" "$@" >"$work/stdout.$label" 2>"$work/stderr.$label"; then
        status=ok
    else
        status="failed (exit $?; see stderr below)"
        tail -5 "$work/stderr.$label" >&2
    fi
    read -r wall user sys rss <"$out"
    cpu=$(echo "$user + $sys" | bc)
    printf '%-10s %8s s wall %8s s cpu %8.1f MB peak RSS  %s\n' "$label" "$wall" "$cpu" "$(echo "$rss / 1024" | bc -l)" "$status"
    eval "${label}_wall=$wall; ${label}_cpu=$cpu; ${label}_rss=$rss"
}

measure weft "$weft" compile "$work/model"

inmanta="${INMANTA:-$HOME/.cache/inmanta-ref/venv/bin/inmanta}"
if [[ -x "$inmanta" ]]; then
    # The reference compiles a project in place and needs a project.yml with its std.
    measure reference bash -c 'cd "$1" && exec "$2" -q compile' _ "$work/model" "$inmanta"
    if [[ -n "${reference_wall:-}" ]]; then
        printf 'speedup: %.1fx wall, %.1fx cpu; memory: %.1f%% of the reference\n' \
            "$(echo "$reference_wall / $weft_wall" | bc -l)" \
            "$(echo "$reference_cpu / $weft_cpu" | bc -l)" \
            "$(echo "100 * $weft_rss / $reference_rss" | bc -l)"
    fi
    if ! diff <(sort "$work/stdout.weft") <(sort "$work/stdout.reference") >/dev/null; then
        echo "warning: the two compilers printed different output" >&2
    fi
else
    echo "reference: not installed ($inmanta); run ../shared/tools/reference-setup.sh"
fi
