#!/usr/bin/env bash
# Compiles one generated model with weft and with the reference compiler, side by side, and
# prints wall time, CPU time and peak RSS of each:
#
# * `weft compile MODEL`: load, check, lower and evaluate the sources;
# * `weft run MODEL.weft`: load and evaluate the artifact that `weft build` made of the same
#   sources (the build is measured and shown, but not counted in the run);
# * the reference's `inmanta compile` of the sources.
#
#   benches/compare-reference.sh [HOSTS] [FLAVOR]      (defaults: 5000 pure)
#   WEFT_RUNS=5 benches/compare-reference.sh            (weft commands: median of 5 runs; 3 by default)
#   WEFT=$(benches/pgo-build.sh) benches/compare-reference.sh   (measure that weft binary, here
#                                                        the PGO build, instead of building one)
#
# The reference is the `inmanta` of the venv made by ../shared/tools/reference-setup.sh
# (override with INMANTA=/path/to/inmanta). Without it, only weft runs. The `std::print` lines
# of every weft command are compared (sorted) with the reference's, and with each other.
set -euo pipefail

hosts="${1:-5000}"
flavor="${2:-pure}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 "$root/benches/gen_model.py" --hosts "$hosts" --flavor "$flavor" "$work/model" >/dev/null
lines=$(cat "$work/model"/*.cf | wc -l)
echo "model: gen_model.py --hosts $hosts --flavor $flavor ($lines lines of main.cf)"

weft="$("$root/benches/weft-binary.sh")"
echo "weft: $weft" >&2

measure() { # key, label, command...
    local key="$1" label="$2"; shift 2
    local out="$work/time.$key"
    if /usr/bin/time -f '%e %U %S %M' -o "$out" "$@" >"$work/stdout.$key" 2>"$work/stderr.$key"; then
        status=ok
    else
        status="failed (exit $?; see stderr below)"
        tail -5 "$work/stderr.$key" >&2
    fi
    read -r wall user sys rss < <(tail -1 "$out")
    cpu=$(echo "$user + $sys" | bc)
    printf '%-20s %8.2f s wall %8.2f s cpu %8.1f MB peak RSS  %s\n' "$label" "$wall" "$cpu" "$(echo "$rss / 1024" | bc -l)" "$status"
    eval "${key}_wall=$wall; ${key}_cpu=$cpu; ${key}_rss=$rss"
}

# A weft command takes about a second and its time varies by 10 to 20% from one run to the
# next on a shared VM (the first run after a build is often the slowest); it is measured
# WEFT_RUNS times (default 3) and the run of median wall time is shown. The reference, which
# takes a minute or more, is measured once.
measure_median() { # key, label, command...
    local key="$1" label="$2"; shift 2
    local runs="${WEFT_RUNS:-3}" i
    : >"$work/runs.$key"
    for ((i = 0; i < runs; i++)); do
        measure "$key" "" "$@" >/dev/null
        echo "$(tail -1 "$work/time.$key")" >>"$work/runs.$key"
    done
    sort -n "$work/runs.$key" | sed -n "$(((runs + 1) / 2))p" >"$work/time.$key"
    read -r wall user sys rss < <(tail -1 "$work/time.$key")
    cpu=$(echo "$user + $sys" | bc)
    printf '%-20s %8.2f s wall %8.2f s cpu %8.1f MB peak RSS  %s (median of %s runs)\n' "$label" "$wall" "$cpu" \
        "$(echo "$rss / 1024" | bc -l)" "$status" "$runs"
    eval "${key}_wall=$wall; ${key}_cpu=$cpu; ${key}_rss=$rss"
}

# Whether two commands printed the same lines (in any order: both compilers print in the
# order their scheduler happens to run the statements).
same_prints() { # key, key
    diff <(sort "$work/stdout.$1") <(sort "$work/stdout.$2") >/dev/null
}

measure_median weft "weft compile" "$weft" compile "$work/model"
measure build "weft build" "$weft" build "$work/model" -o "$work/model.weft"
artifact_size=$(stat -c %s "$work/model.weft")
measure_median run "weft run" "$weft" run "$work/model.weft"
echo "artifact: $artifact_size bytes ($(echo "scale=2; $artifact_size / 1048576" | bc) MiB)"
if same_prints weft run; then
    echo "prints: weft run = weft compile ($(wc -l <"$work/stdout.run") lines)"
else
    echo "warning: weft run and weft compile printed different output" >&2
fi

inmanta="${INMANTA:-$HOME/.cache/inmanta-ref/venv/bin/inmanta}"
if [[ -x "$inmanta" ]]; then
    # The reference compiles a project in place and needs a project.yml with its std.
    measure reference "reference compile" bash -c 'cd "$1" && exec "$2" -q compile' _ "$work/model" "$inmanta"
    if [[ -n "${reference_wall:-}" ]]; then
        for key in weft run; do
            wall_var="${key}_wall"; cpu_var="${key}_cpu"; rss_var="${key}_rss"
            [[ $key == weft ]] && label="weft compile" || label="weft run"
            printf '%-13s vs reference: %.1fx wall, %.1fx cpu; peak RSS %.1f%% of the reference (%.2fx less)\n' \
                "$label" \
                "$(echo "$reference_wall / ${!wall_var}" | bc -l)" \
                "$(echo "$reference_cpu / ${!cpu_var}" | bc -l)" \
                "$(echo "100 * ${!rss_var} / $reference_rss" | bc -l)" \
                "$(echo "$reference_rss / ${!rss_var}" | bc -l)"
        done
    fi
    for key in weft run; do
        [[ $key == weft ]] && label="weft compile" || label="weft run"
        if same_prints "$key" reference; then
            echo "prints: $label = reference ($(wc -l <"$work/stdout.reference") lines)"
        else
            echo "warning: $label and the reference printed different output" >&2
        fi
    done
else
    echo "reference: not installed ($inmanta); run ../shared/tools/reference-setup.sh"
fi
