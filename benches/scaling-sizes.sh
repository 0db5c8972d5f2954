# Sourced by the scripts that time one model at several sizes (wait-cycles.sh,
# big-relation.sh): they define `write_model N`, which prints the `main.cf` of the model with
# N instances, and call `time_sizes DEFAULT_SIZES -- SIZES_GIVEN...`.
#
# For each size, prints the wall seconds and peak RSS of `weft compile` (the binary WEFT names,
# or the plain release build, built first), then what the model printed, prefixed with
# "  prints: ". The reference's `inmanta compile` is timed too for the sizes in REF_SIZES when
# INMANTA names its `inmanta`.

scaling_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

time_sizes() { # default sizes..., --, given sizes...
    local defaults=() sizes=() weft n dir
    while [[ $# -gt 0 && $1 != -- ]]; do defaults+=("$1"); shift; done
    [[ $# -gt 0 ]] && shift
    sizes=("$@")
    [[ ${#sizes[@]} -gt 0 ]] || sizes=("${defaults[@]}")
    weft="$("$scaling_root/benches/weft-binary.sh")"
    scaling_work="$(mktemp -d)"
    trap 'rm -rf "$scaling_work"' EXIT
    for n in "${sizes[@]}"; do
        dir="$scaling_work/m$n"
        mkdir -p "$dir"
        printf 'name: m\nmodulepath: libs\ndownloadpath: libs\nrepo: []\n' > "$dir/project.yml"
        write_model "$n" > "$dir/main.cf"
        /usr/bin/time -f "weft      $n instances: %e s, %M KB" "$weft" compile "$dir" | sed 's/^/  prints: /'
        if [[ -n "${INMANTA:-}" && " ${REF_SIZES:-} " == *" $n "* ]]; then
            (cd "$dir" && /usr/bin/time -f "reference $n instances: %e s, %M KB" "$INMANTA" -q compile | sed 's/^/  prints: /')
        fi
    done
}
