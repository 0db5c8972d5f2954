#!/usr/bin/env bash
# Prints the path of the weft binary the bench scripts measure: the one `WEFT` names (the PGO
# build of benches/pgo-build.sh, say), or else the plain release build, built first.
set -euo pipefail
if [[ -n "${WEFT:-}" ]]; then
    echo "$WEFT"
    exit 0
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
cargo build --release -q -p weft-cli --manifest-path "$root/Cargo.toml"
echo "${CARGO_TARGET_DIR:-$root/target}/release/weft"
