#!/usr/bin/env bash
# Runs two weft binaries on the same command in alternation and prints, for each, the median
# wall time and the median peak RSS: the A/B comparison the rounds of benches/README.md use.
# Alternating, rather than running one binary N times and then the other, spreads the VM's
# slow minutes over both.
#
#   benches/alternate.sh N BINARY_A BINARY_B ARGS...
#   benches/alternate.sh 11 /tmp/weft.before target/release/weft export MODEL -o /tmp/out.json
#
# Each line: binary, median wall seconds, median peak RSS in KB, then every wall time.
set -euo pipefail
if [[ $# -lt 4 ]]; then
    sed -n '2,10p' "$0" >&2
    exit 2
fi
runs=$1 a=$2 b=$3
shift 3
timing=$(mktemp)
trap 'rm -f "$timing"' EXIT
for _ in $(seq "$runs"); do
    for binary in "$a" "$b"; do
        /usr/bin/time -f "%e %M" -o "$timing" "$binary" "$@" >/dev/null 2>&1 || true
        echo "$binary $(cat "$timing")"
    done
done | awk '
    { wall[$1] = wall[$1] " " $2; rss[$1] = rss[$1] " " $3; order[$1] = order[$1] ? order[$1] : ++seen }
    function median(list,    n, v, i, j, t) {
        n = split(list, v, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
        return v[int((n + 1) / 2)]
    }
    END { for (k in wall) printf "%s median %ss %sKB :%s\n", k, median(wall[k]), median(rss[k]), wall[k] }'
