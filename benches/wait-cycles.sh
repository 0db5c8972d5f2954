#!/usr/bin/env bash
# Times `weft compile` on a model that breaks one wait cycle per instance (scheduler step 4),
# and so also retries the cells nobody waits for (step 3) at every iteration: each instance's
# implementation extends its own relation only if that relation is already non-empty. Cost
# must grow linearly with the number of instances; the reference's grows quadratically.
#
#   benches/wait-cycles.sh [SIZE...]          default sizes: 2000 4000 8000 16000 64000
#
# Above about 100,000 instances the model needs more iterations than the reference allows
# (INMANTA_MAX_ITERATIONS, 100,000), and both compilers stop with that error.
#   INMANTA=/path/to/inmanta REF_SIZES="2000 4000" benches/wait-cycles.sh
#
# Prints one line per size: instances, wall seconds and peak RSS of weft (and of the
# reference for the sizes in REF_SIZES, when INMANTA names its `inmanta`).
set -euo pipefail
source "$(dirname "$0")/scaling-sizes.sh"

write_model() { # instances
    local n="$1"
    cat <<CF
import std
entity A:
  int n
end
A.others [0:] -- A
implementation guard for A:
  if std::count(self.others) > 0:
    self.others += A(n=0)
  end
end
implement A using guard when self.n > 0
implement A using std::none
for i in std::sequence($n):
  A(n=i+1)
end
CF
}

time_sizes 2000 4000 8000 16000 64000 -- "$@"
