#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/fuzz_*.c) with clang in build-fuzz and runs each
# for FUZZ_SECONDS (default 20) over its seed corpus tests/fuzz/corpus/<target>/. New inputs
# go to tests/fuzz/corpus-run/<target>/ (git-ignored); crashes to build-fuzz/artifacts/.
# Exits non-zero when any target finds a crash, leak, timeout or sanitizer report.
#   FUZZ_SECONDS=60 tools/run-fuzzers.sh            all targets
#   tools/run-fuzzers.sh fuzz_json                  only the named targets
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/script-help.sh" # -h/--help: the comment above, exit 0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-20}"
jobs="${JOBS:-$(nproc)}"

if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
    echo "run-fuzzers: clang is not installed (tools/install-deps.sh installs it)" >&2
    exit 1
fi

mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DPP_FUZZ=ON -DPP_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j"$jobs" --target fuzzers

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for src in "$root"/tests/fuzz/fuzz_*.c; do
        targets+=("$(basename "$src" .c)")
    done
fi

mkdir -p "$build/artifacts"
failed=0
for t in "${targets[@]}"; do
    seeds="$root/tests/fuzz/corpus/$t"
    work="$root/tests/fuzz/corpus-run/$t"
    mkdir -p "$work"
    dirs=("$work")
    [ -d "$seeds" ] && dirs+=("$seeds")
    echo "== $t: ${seconds}s"
    # -timeout: one input taking over 10 s is a finding; -rss_limit_mb keeps a leak from
    # taking the machine down before ASan reports it.
    if "$build/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$t-" "${dirs[@]}" >"$build/$t.log" 2>&1; then
        grep -E "^stat::number_of_executed_units|^Done" "$build/$t.log" | tr '\n' ' '
        echo
    else
        echo "run-fuzzers: $t FAILED (log: $build/$t.log)" >&2
        tail -n 40 "$build/$t.log" >&2
        failed=$((failed + 1))
    fi
done

echo "fuzzers: $((${#targets[@]} - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
