#!/usr/bin/env bash
# Times `weft compile` on a model whose relations grow with the model: every instance joins
# one relation end of a single instance (`Net.ifaces`, the inverse of `Iface.net [1]`) and of
# a second one through a `[0:]` end of its own (`Iface.groups`). Adding an element asks
# whether the relation holds it already; answered by scanning the elements, as the reference
# does (`value in list`), that costs n²/2 comparisons for n elements. Cost must grow
# linearly with the number of instances.
#
#   benches/big-relation.sh [SIZE...]          default sizes: 25000 50000 100000 200000
#   INMANTA=/path/to/inmanta REF_SIZES="25000 50000" benches/big-relation.sh
#
# Prints one line per size: instances, wall seconds and peak RSS of weft (and of the
# reference for the sizes in REF_SIZES, when INMANTA names its `inmanta`). Each run prints
# the sizes of both relations, which must be SIZE.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# WEFT names a weft binary to measure; without it, the plain release build is built.
weft="$("$root/benches/weft-binary.sh")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(25000 50000 100000 200000)
for n in "${sizes[@]}"; do
    dir="$work/m$n"
    mkdir -p "$dir"
    printf 'name: m\nmodulepath: libs\ndownloadpath: libs\nrepo: []\n' > "$dir/project.yml"
    cat > "$dir/main.cf" <<CF
import std
entity Net:
end
entity Group:
end
entity Iface:
  int n
end
Net.ifaces [0:] -- Iface.net [1]
Group.members [0:] -- Iface.groups [0:]
implement Net using std::none
implement Group using std::none
implement Iface using std::none
net = Net()
group = Group()
for i in std::sequence($n):
  Iface(n=i, net=net, groups=[group])
end
ifaces = std::len(net.ifaces)
members = std::len(group.members)
std::print("{{ifaces}} {{members}}")
CF
    /usr/bin/time -f "weft      $n instances: %e s, %M KB" "$weft" compile "$dir" | sed 's/^/  relation sizes: /'
    if [[ -n "${INMANTA:-}" && " ${REF_SIZES:-} " == *" $n "* ]]; then
        (cd "$dir" && /usr/bin/time -f "reference $n instances: %e s, %M KB" "$INMANTA" -q compile | sed 's/^/  relation sizes: /')
    fi
done
