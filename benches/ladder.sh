#!/usr/bin/env bash
# The scaling ladder: weft and the reference compiler on generated models from about 1,000 to
# about 1,000,000 instances, one process per command, timed with /usr/bin/time.
#
#   benches/ladder.sh [options]
#
#   --flavor pure|resources|both   which models (default: both)
#   --max-instances N              leave out rungs above about N instances (default: none,
#                                  the largest rung has about 1,000,000)
#   --ref-max-instances N          run the reference only on rungs up to about N instances
#                                  (default: 190000, the 186k rung; larger rungs are weft alone)
#   --no-reference                 weft alone on every rung
#   --runs N                       run weft N times per rung and report the run with the median
#                                  wall time (default: 1); the reference runs once
#   --weft-arg ARG                 an extra argument for every weft command, repeatable (for
#                                  example `--weft-arg=--jobs=2` once the CLI has that flag)
#   --keep DIR                     keep the models and outputs in DIR (default: a temporary
#                                  directory, removed at the end)
#
# WEFT=path measures that weft binary (the PGO build of benches/pgo-build.sh, say) instead of
# building the plain release build.
#
# Rungs (hosts of `benches/gen_model.py`, chosen for the instance counts the generator states
# in expected_counts.txt; a resources model has about twice the instances of a pure model with
# the same hosts, about half of them NullResources):
#
#   instances   pure          resources
#   ~1k         54 (1,030)    27 (1,036)
#   ~10k        540 (10,084)  270 (10,059)
#   ~93k        5000 (93,272) 2500 (93,012)
#   ~186k       10000         5000 (186,014)
#               (186,511)
#   ~500k       27000         13500 (502,138)
#               (503,542)
#   ~1M         54000         27000 (1,004,266)
#               (1,007,074)
#
# Commands: pure models run `weft compile DIR` against the reference's `inmanta -q compile`;
# resources models run `weft export DIR -o FILE` against `inmanta -q export -j FILE`, which
# writes the JSON without a server (the reference needs no further flag for that offline).
# The reference runs with `--no-cache`: it would otherwise write a cache of compiled .cf files
# into the project, work weft does not do, and a second run would read it.
#
# Agreement ("agree" column): for pure models, both print the same `std::print` lines
# (compared sorted) and weft creates the number of instances the generator states (from
# `weft compile --stats`). For resources models, both print the same lines and write the same
# resources (compared after sorting resources, keys, `requires`, references and mutators, as
# tools/export-oracle.py normalises them), and weft exports the number of resources the
# generator states. On rungs without the reference, only the counts are checked. The script
# exits with status 1 when a rung does not agree.
#
# The reference is the `inmanta` of the venv made by ../shared/tools/reference-setup.sh
# (override with INMANTA=/path/to/inmanta). Without it, weft runs alone.
#
# The table goes to stdout as Markdown, one row as each rung completes; progress and problems
# go to stderr. Run it on an otherwise idle machine: the largest reference rungs take minutes.
set -euo pipefail

flavors=(pure resources)
max_instances=""
ref_max_instances=190000
reference=yes
runs=1
weft_args=()
keep=""

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit "${1:-0}"; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --flavor) shift; case "${1:-}" in
            pure|resources) flavors=("$1") ;;
            both) flavors=(pure resources) ;;
            *) echo "--flavor: pure, resources or both" >&2; exit 2 ;;
            esac ;;
        --flavor=*) set -- "--flavor" "${1#--flavor=}" "${@:2}"; continue ;;
        --max-instances) shift; max_instances="${1:?--max-instances N}" ;;
        --max-instances=*) max_instances="${1#*=}" ;;
        --ref-max-instances) shift; ref_max_instances="${1:?--ref-max-instances N}" ;;
        --ref-max-instances=*) ref_max_instances="${1#*=}" ;;
        --no-reference) reference=no ;;
        --runs) shift; runs="${1:?--runs N}" ;;
        --runs=*) runs="${1#*=}" ;;
        --weft-arg) shift; weft_args+=("${1:?--weft-arg ARG}") ;;
        --weft-arg=*) weft_args+=("${1#*=}") ;;
        --keep) shift; keep="${1:?--keep DIR}" ;;
        --keep=*) keep="${1#*=}" ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
    shift
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "--runs: a positive number" >&2; exit 2; }

# hosts:approximate instances, per flavor (exact counts are read from expected_counts.txt).
rungs_pure=(54:1030 540:10084 5000:93272 10000:186511 27000:503542 54000:1007074)
rungs_resources=(27:1036 270:10059 2500:93012 5000:186014 13500:502138 27000:1004266)

root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -n "$keep" ]]; then
    mkdir -p "$keep"
    work="$(cd "$keep" && pwd)"
else
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
fi

weft="$("$root/benches/weft-binary.sh")"

inmanta="${INMANTA:-$HOME/.cache/inmanta-ref/venv/bin/inmanta}"
if [[ $reference == yes && ! -x "$inmanta" ]]; then
    echo "reference: not installed ($inmanta); run ../shared/tools/reference-setup.sh. weft runs alone." >&2
    reference=no
fi

# Runs a command under /usr/bin/time; sets t_wall, t_cpu (user + system, seconds) and t_rss
# (peak resident set, KiB), and t_ok to yes or no. Output goes to $out.stdout and $out.stderr.
# The wall time is taken with the shell's nanosecond clock around the command rather than from
# /usr/bin/time, whose hundredths of a second are too coarse for the smallest rungs (it adds
# the fork of /usr/bin/time itself, under a millisecond).
timed() { # out, command...
    local out="$1"; shift
    local start end
    start=$(date +%s%N)
    if /usr/bin/time -f '%e %U %S %M' -o "$out.time" "$@" >"$out.stdout" 2>"$out.stderr"; then
        t_ok=yes
    else
        t_ok=no
        echo "failed (exit status $?): $*" >&2
        tail -5 "$out.stderr" >&2
    fi
    end=$(date +%s%N)
    local elapsed user sys
    read -r elapsed user sys t_rss < <(tail -1 "$out.time")
    t_wall=$(printf '%.3f' "$(echo "($end - $start) / 1000000000" | bc -l)")
    t_cpu=$(printf '%.2f' "$(echo "$user + $sys" | bc)")
}

# Runs weft $runs times and keeps the run with the median wall time (its outputs too).
timed_weft() { # out, weft arguments...
    local out="$1"; shift
    local i ok=yes
    : >"$out.runs"
    for ((i = 1; i <= runs; i++)); do
        timed "$out.$i" "$weft" "$@" "${weft_args[@]}"
        [[ $t_ok == yes ]] || ok=no
        echo "$t_wall $t_cpu $t_rss $i" >>"$out.runs"
    done
    local median=$(((runs + 1) / 2))
    read -r t_wall t_cpu t_rss i < <(sort -n "$out.runs" | sed -n "${median}p")
    for ext in stdout stderr; do cp "$out.$i.$ext" "$out.$ext"; done
    t_ok=$ok
}

# The `std::print` lines of a run: the reference also logs to stdout (`inmanta -q export -j`
# warns "The environment for this model should be set for export to server!"), and those log
# lines ("<logger> <level> <message>") are not the model's output.
prints() { # out
    grep -Ev '^[A-Za-z0-9_.]+ +(DEBUG|INFO|WARNING|ERROR|CRITICAL) ' "$1.stdout" | sort || true
}

# Whether two runs printed the same lines, in any order: both compilers print in the order
# their scheduler happens to run the statements.
same_prints() { # out, out
    diff <(prints "$1") <(prints "$2") >/dev/null
}

# Compares two export files after normalising them as tools/export-oracle.py does; prints
# "same" or what differs first.
compare_exports() { # weft.json, reference.json
    python3 - "$1" "$2" <<'EOF'
import json, sys

def canonical(value):
    return json.dumps(value, sort_keys=True)

def normalise(resources):
    out = {}
    for resource in resources:
        resource = dict(resource)
        resource["requires"] = sorted(resource.get("requires", []))
        resource["references"] = sorted(resource.get("references", []), key=lambda r: canonical(r.get("id")))
        resource["mutators"] = sorted(resource.get("mutators", []), key=canonical)
        out[resource["id"]] = canonical(resource)
    return out

with open(sys.argv[1]) as f:
    weft = normalise(json.load(f))
with open(sys.argv[2]) as f:
    ref = normalise(json.load(f))
if weft == ref:
    print("same")
elif weft.keys() != ref.keys():
    only_weft = sorted(weft.keys() - ref.keys())
    only_ref = sorted(ref.keys() - weft.keys())
    print(f"{len(weft)} vs {len(ref)} resources; only weft: {only_weft[:1]}, only reference: {only_ref[:1]}")
else:
    first = next(k for k in sorted(weft) if weft[k] != ref[k])
    print(f"{sum(weft[k] != ref[k] for k in weft)} resources differ, first {first}")
EOF
    # A comparison that could not be made is not an agreement.
    [[ $? == 0 ]] || echo "the comparison failed"
}

# The number of resources in an export file without loading it: every resource object has
# exactly one `requires` key (NullResources have no other field of that name).
count_resources() { # file
    { grep -o '"requires":' "$1" || true; } | wc -l
}

expected() { # model dir, key
    sed -n "s/^$2=//p" "$1/expected_counts.txt"
}

# Figures for the table. /usr/bin/time gives wall time in hundredths of a second, so a run of
# the smallest rung can show 0.00 s: no ratio is computed from that.
fmt_mb() { echo "scale=1; $1 / 1024" | bc; }
ratio() { [[ $(echo "$2 > 0" | bc) == 1 ]] && echo "$(echo "scale=1; $1 / $2" | bc)x" || echo "-"; }
rate() { [[ $(echo "$2 > 0" | bc) == 1 ]] && printf '%.0f' "$(echo "$1 / $2" | bc -l)" || echo "-"; }

echo "weft: $weft ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo 'no git')$(git -C "$root" diff --quiet 2>/dev/null || echo ', with uncommitted changes'))" >&2
echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo
echo "| flavor | hosts | instances | weft wall | weft CPU | weft peak RSS | weft instances/s | reference wall | reference peak RSS | reference instances/s | wall ratio (ref/weft) | RSS ratio (ref/weft) | agree |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"

status=0
for flavor in "${flavors[@]}"; do
    rungs_var="rungs_${flavor}[@]"
    for rung in "${!rungs_var}"; do
        hosts="${rung%%:*}"
        approx="${rung##*:}"
        if [[ -n "$max_instances" && $approx -gt $max_instances ]]; then
            continue
        fi
        model="$work/$flavor-$hosts"
        rm -rf "$model"
        echo "generating $flavor, $hosts hosts (about $approx instances)" >&2
        python3 "$root/benches/gen_model.py" --hosts "$hosts" --flavor "$flavor" "$model" >"$work/counts"
        mv "$work/counts" "$model/expected_counts.txt"
        instances=$(expected "$model" instances)
        resources=$(expected "$model" resources)
        out="$work/$flavor-$hosts"
        agree=""

        echo "weft, $flavor, $hosts hosts" >&2
        if [[ $flavor == pure ]]; then
            timed_weft "$out.weft" compile --stats "$model"
            made=$(sed -n 's/^weft: \([0-9]*\) instances.*/\1/p' "$out.weft.stderr" | tail -1)
            if [[ "$made" == "$instances" ]]; then
                counts="counts ok"
            else
                counts="weft made ${made:-?} instances, expected $instances"
            fi
        else
            timed_weft "$out.weft" export "$model" -o "$out.weft.json"
            made=$( [[ -f "$out.weft.json" ]] && count_resources "$out.weft.json" || echo '?')
            if [[ "$made" == "$resources" ]]; then
                counts="counts ok"
            else
                counts="weft exported $made resources, expected $resources"
            fi
        fi
        [[ $t_ok == yes ]] || counts="weft failed"
        w_wall=$t_wall w_cpu=$t_cpu w_rss=$t_rss w_ok=$t_ok

        r_wall="" r_rss=""
        if [[ $reference == yes && $approx -le $ref_max_instances ]]; then
            echo "reference, $flavor, $hosts hosts" >&2
            if [[ $flavor == pure ]]; then
                timed "$out.ref" bash -c 'cd "$1" && exec "$2" -q compile --no-cache' _ "$model" "$inmanta"
            else
                timed "$out.ref" bash -c 'cd "$1" && exec "$2" -q export --no-cache -j "$3"' _ "$model" "$inmanta" "$out.ref.json"
            fi
            r_wall=$t_wall r_rss=$t_rss
            if [[ $t_ok != yes || $w_ok != yes ]]; then
                agree="no: a command failed"
            elif ! same_prints "$out.weft" "$out.ref"; then
                agree="no: different prints"
            elif [[ $flavor == resources ]] && exports=$(compare_exports "$out.weft.json" "$out.ref.json") &&
                [[ $exports != same ]]; then
                agree="no: $exports"
            elif [[ $counts != "counts ok" ]]; then
                agree="no: $counts"
            else
                agree="yes (counts ok)"
            fi
        else
            agree="weft alone: $counts"
        fi
        [[ $agree == yes* || $agree == "weft alone: counts ok" ]] || status=1

        row="| $flavor | $hosts | $instances | $w_wall s | $w_cpu s | $(fmt_mb "$w_rss") MB | $(rate "$instances" "$w_wall") |"
        if [[ -n "$r_wall" ]]; then
            row+=" $r_wall s | $(fmt_mb "$r_rss") MB | $(rate "$instances" "$r_wall") | $(ratio "$r_wall" "$w_wall") | $(ratio "$r_rss" "$w_rss") |"
        else
            row+=" | | | | |"
        fi
        echo "$row $agree |"
        # The largest models and their exports take hundreds of megabytes: free the space.
        [[ -n "$keep" ]] || rm -rf "$model" "$out".*
    done
done
exit $status
