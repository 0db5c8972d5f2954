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
# the sizes of both relations (the "prints:" line), which must be SIZE.
set -euo pipefail
source "$(dirname "$0")/scaling-sizes.sh"

write_model() { # instances
    local n="$1"
    cat <<CF
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
}

time_sizes 25000 50000 100000 200000 -- "$@"
