#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run), on Debian 12 as root:
#   1. tools/install-deps.sh
#   2. build/       normal build (CUDA when a toolkit is found, PP_CUDA to override) + ctest
#   3. build-asan/  CPU build with ASan + UBSan + ctest
#   4. tools/cross-check.sh: the engine library compiled and linked for aarch64, its CPU tests and golden cases run
#      under qemu-user (one entry)
#   5. tools/kernel-report.sh: no CUDA GEMV kernel spills or passes 128 registers or its shared-memory budget,
#      sm_87 and sm_90 (one entry; skipped without nvcc)
#   6. tools/analyze.sh: the clang static analyzer over a CPU build of everything, no report but the
#      known false ones of tools/analyze-known.txt (one entry; skipped without scan-build)
#   7. tools/run-fuzzers.sh with a short budget (FUZZ_SECONDS, default 10 per target)
# Ends with one line "N passed, N failed" (tests, plus one entry per fuzz target; a failed
# build or configure counts as a failure). Exit status 0 only when nothing failed.
#   SKIP_DEPS=1 SKIP_FUZZ=1 tools/test.sh       skip those stages
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/script-help.sh" # -h/--help: the comment above, exit 0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="${JOBS:-$(nproc)}"
logs="$root/build-logs"
mkdir -p "$logs"

passed=0
failed=0
skipped=0
problems=()

note_fail() {
    failed=$((failed + 1))
    problems+=("$1")
    echo "test.sh: FAILED: $1" >&2
}

# Configures and builds one tree (status 1 only when configure fails); the logs keep the
# compiler output out of the summary.
build_tree() {
    local dir="$1"
    shift
    echo "== build $dir ($*)"
    if ! cmake -S "$root" -B "$dir" "$@" >"$logs/$(basename "$dir").configure.log" 2>&1; then
        tail -n 30 "$logs/$(basename "$dir").configure.log" >&2
        note_fail "configure $dir"
        return 1
    fi
    # -k: a target that does not build (someone's work in progress) must not hide the
    # results of the tests that do; ctest then reports the missing ones as failed.
    if ! cmake --build "$dir" -j"$jobs" -- -k >"$logs/$(basename "$dir").build.log" 2>&1; then
        grep -E "error|Error" "$logs/$(basename "$dir").build.log" | head -n 30 >&2
        note_fail "build $dir"
    fi
}

# Runs ctest in dir and adds its counts to the totals.
run_ctest() {
    local dir="$1" log="$logs/$(basename "$1").ctest.log"
    echo "== ctest $dir"
    (cd "$dir" && ctest --output-on-failure -j"$jobs" --timeout 900) >"$log" 2>&1
    local rc=$?
    grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|\(Skipped\)|\(Failed\)|\(Timeout\)" "$log"
    local line total nfail nskip
    line="$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log" | tail -n 1)"
    if [ -z "$line" ]; then
        if grep -q "No tests were found" "$log"; then return 0; fi
        tail -n 30 "$log" >&2
        note_fail "ctest $dir (no summary)"
        return 1
    fi
    total="$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")"
    nfail="$(sed -E 's/.* ([0-9]+) tests failed.*/\1/' <<<"$line")"
    nskip="$(grep -c "(Skipped)" "$log" || true)"
    passed=$((passed + total - nfail - nskip))
    skipped=$((skipped + nskip))
    failed=$((failed + nfail))
    if [ "$nfail" -gt 0 ]; then
        problems+=("$nfail test(s) in $dir (log: $log)")
        # CI keeps only what is printed: each failed test's own output (ctest puts it after
        # the test's status line), at most 120 lines per test.
        awk '/\*\*\*(Failed|Timeout|Exception)/ { show = 1; n = 0; print; next }
             show && /^ *[0-9]+\/[0-9]+ Test +#/ { show = 0 }
             show && n++ < 120' "$log" >&2
    fi
    if [ "$rc" -ne 0 ] && [ "$nfail" -eq 0 ]; then note_fail "ctest $dir exited $rc"; fi
    return 0
}

start=$SECONDS
if [ "${SKIP_DEPS:-0}" != 1 ]; then
    tools/install-deps.sh --browser || note_fail "install-deps"
fi

if build_tree "$root/build" -DPP_CUDA="${PP_CUDA:-AUTO}"; then
    run_ctest "$root/build"
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
if build_tree "$root/build-asan" -DPP_SANITIZE=ON -DPP_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
    run_ctest "$root/build-asan"
fi

echo "== cross-check (aarch64)"
tools/cross-check.sh "$root/build-cross-aarch64" >"$logs/cross-check.log" 2>&1
case $? in
0) passed=$((passed + 1)) ;;
77) skipped=$((skipped + 1)) ;;
*) note_fail "cross-check aarch64 (log: $logs/cross-check.log)" ;;
esac
tail -n 1 "$logs/cross-check.log"

echo "== kernel report (ptxas: registers, spills of every CUDA kernel)"
tools/kernel-report.sh >"$logs/kernel-report.log" 2>&1
case $? in
0) passed=$((passed + 1)) ;;
77) skipped=$((skipped + 1)) ;;
*) note_fail "kernel-report: a GEMV kernel spills or passes 128 registers or its budget (log: $logs/kernel-report.log)" ;;
esac
grep -E "spills|<- |^kernel-report" "$logs/kernel-report.log" | tail -n 5

echo "== static analysis (scan-build)"
tools/analyze.sh "$root/build-analyze" >"$logs/analyze.log" 2>&1
case $? in
0) passed=$((passed + 1)) ;;
77) skipped=$((skipped + 1)) ;;
*)
    grep -vE "^analyze: [0-9]+ distinct" "$logs/analyze.log" | head -n 40 >&2
    note_fail "static analysis: reports not known to be false (log: $logs/analyze.log)"
    ;;
esac
tail -n 1 "$logs/analyze.log"

if [ "${SKIP_FUZZ:-0}" != 1 ]; then
    echo "== fuzzers"
    FUZZ_SECONDS="${FUZZ_SECONDS:-10}" tools/run-fuzzers.sh >"$logs/fuzz.log" 2>&1
    fuzz_rc=$?
    cat "$logs/fuzz.log" | grep -E "^==|^Done|FAILED|^fuzzers:"
    line="$(grep -E "^fuzzers: [0-9]+ passed, [0-9]+ failed" "$logs/fuzz.log" | tail -n 1)"
    if [ -n "$line" ]; then
        fp="$(sed -E 's/fuzzers: ([0-9]+) passed.*/\1/' <<<"$line")"
        ff="$(sed -E 's/.* ([0-9]+) failed/\1/' <<<"$line")"
        passed=$((passed + fp))
        failed=$((failed + ff))
        [ "$ff" -gt 0 ] && problems+=("$ff fuzz target(s) (log: $logs/fuzz.log)")
    elif [ "$fuzz_rc" -ne 0 ]; then
        tail -n 30 "$logs/fuzz.log" >&2
        note_fail "fuzz build"
    fi
fi

echo
for p in "${problems[@]+"${problems[@]}"}"; do echo "failed: $p"; done
echo "$skipped skipped; $((SECONDS - start)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
