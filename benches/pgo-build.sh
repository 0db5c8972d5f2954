#!/usr/bin/env bash
# Builds `weft` with profile-guided optimisation (PGO) and prints the path of the binary.
#
#   benches/pgo-build.sh                    (prints e.g. target/pgo/release/weft)
#   WEFT=$(benches/pgo-build.sh) benches/compare-reference.sh 5000 pure
#
# The evaluator is an interpreter: its time goes to many small branches whose layout and
# inlining the compiler can only guess. PGO builds an instrumented `weft`, runs it on a
# training set, and compiles again with the counts it recorded. This is how a release binary
# of weft is meant to be built; `cargo build --release` stays the plain build that the README
# and the test suite use.
#
# The training set is weft's own test material, not the benchmarks' models, so that the
# figures the benches report for a PGO build are not those of a binary trained on the very
# generator they measure:
# * every conformance case under tests/conformance (errors included: they are models too);
# * the bundled example: compiled, exported, built into an artifact that is run and inspected.
# Trained on that alone, the build evaluates hosts5000 12% faster and exports resources5000 7%
# faster than the plain build (benches/README.md, twentieth round).
#
#   PGO_TRAINING=generated benches/pgo-build.sh
#
# adds `gen_model.py --hosts 300` models in both flavours (compile with one thread and with
# all, export, build an artifact, run and inspect it): a few points more on the generated
# benchmarks (15% and 10%), which are of that generator's family.
#
# It needs `llvm-profdata` from the toolchain's `llvm-tools` component, which it installs with
# rustup when missing. The instrumented and the optimised builds have target directories of
# their own (`target/pgo-instrumented`, `target/pgo`), as their RUSTFLAGS differ from a plain
# build's. A full run takes about five minutes on two cores.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
log() { echo "pgo-build: $*" >&2; }
case "${PGO_TRAINING:-corpus}" in
    corpus | generated) ;;
    *) log "PGO_TRAINING must be corpus or generated, not '$PGO_TRAINING'"; exit 2 ;;
esac

host="$(rustc -vV | sed -n 's/^host: //p')"
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [[ ! -x "$profdata" ]]; then
    log "installing the llvm-tools component for llvm-profdata"
    rustup component add llvm-tools >&2 || true
fi
if [[ ! -x "$profdata" ]]; then
    log "llvm-profdata not found at $profdata; install it with 'rustup component add llvm-tools'"
    exit 1
fi

profiles="$target/pgo-profiles"
rm -rf "$profiles"
mkdir -p "$profiles"

log "building the instrumented weft"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$profiles" CARGO_TARGET_DIR="$target/pgo-instrumented" \
    cargo build --release -q -p weft-cli --manifest-path "$root/Cargo.toml"
instrumented="$target/pgo-instrumented/release/weft"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export LLVM_PROFILE_FILE="$profiles/weft-%p-%m.profraw"

if [[ "${PGO_TRAINING:-corpus}" == generated ]]; then
    log "training on generated models (300 hosts)"
    python3 "$root/benches/gen_model.py" --hosts 300 --flavor pure "$work/pure" >/dev/null
    python3 "$root/benches/gen_model.py" --hosts 300 --flavor resources "$work/resources" >/dev/null
    "$instrumented" compile --jobs 1 "$work/pure" >/dev/null
    "$instrumented" compile "$work/pure" >/dev/null
    "$instrumented" export "$work/resources" -o "$work/resources.json" >/dev/null
    "$instrumented" build "$work/pure" -o "$work/pure.weft" >/dev/null
    "$instrumented" run "$work/pure.weft" >/dev/null
    "$instrumented" inspect "$work/pure.weft" >/dev/null
    "$instrumented" build "$work/resources" -o "$work/resources.weft" >/dev/null
    "$instrumented" export "$work/resources.weft" -o "$work/resources2.json" >/dev/null
fi

log "training on the conformance cases and the bundled example"
cases=0
while IFS= read -r case; do
    # Many cases are expected to fail: their diagnostics are part of what is trained.
    "$instrumented" compile --color never "$case" >/dev/null 2>&1 || true
    cases=$((cases + 1))
done < <(find "$root/tests/conformance" -name main.cf -printf '%h\n' | sort)
"$instrumented" compile "$root/examples/inventory" >/dev/null
"$instrumented" export "$root/examples/inventory" -o "$work/inventory.json" >/dev/null
"$instrumented" build "$root/examples/inventory" -o "$work/inventory.weft" >/dev/null 2>&1
"$instrumented" run "$work/inventory.weft" >/dev/null
"$instrumented" inspect "$work/inventory.weft" >/dev/null
log "trained on $cases conformance cases"

# The profile's name carries a digest of its contents: cargo tracks RUSTFLAGS, not the file
# they name, so a new profile must change the flags to rebuild everything with it.
"$profdata" merge -o "$profiles/merged.profdata" "$profiles"/*.profraw
digest="$(sha256sum "$profiles/merged.profdata" | cut -c1-16)"
profile="$profiles/weft-$digest.profdata"
mv "$profiles/merged.profdata" "$profile"
rm -f "$profiles"/*.profraw

log "building the optimised weft"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$profile" CARGO_TARGET_DIR="$target/pgo" \
    cargo build --release -q -p weft-cli --manifest-path "$root/Cargo.toml"
echo "$target/pgo/release/weft"
