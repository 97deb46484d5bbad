#!/usr/bin/env bash
# Side-by-side CPU matrix-vector speed: ggml's MUL_MAT perf cases against personaplex-bench gemv
# on the same shape (4096 x 14336, the shape ggml's test-backend-ops times), the same thread count
# and batches 1, 2, 4 and 8; each figure is the best of REPEAT runs (default 3), which keeps other
# load on the machine out of it, and the two sides' runs alternate (ours, ggml, ours, ...) so a
# spell of load or a change of clock speed meets both alike.
# Both read one copy of the weight again and again (ours with --in-cache, as test-backend-ops
# does), so a weight that fits the last-level cache is timed largely from it on both sides.
#   [REPEAT=N] tools/bench-vs-ggml.sh GGML_SRC_DIR [BUILD_DIR]
# GGML_SRC_DIR is a ggml source tree you provide (github.com/ggml-org/ggml); its test-backend-ops
# is built in GGML_SRC_DIR/build-bench. BUILD_DIR (default build/) holds personaplex-bench.
# Prints the raw figures and, per pair, our weights/s over ggml's (> 1: faster per weight); exit
# status 1 when a row has no figure (a program that failed or printed nothing it could read).
# A developer tool: the test suite runs it only with stand-ins for both programs
# (tests/bench_vs_ggml_order.sh). Pairs (format here / ggml type):
#   nf2 / q2_K, int4 / q4_K, nf4 / iq4_nl, bf16 / bf16, and the GGUF formats against themselves:
#   q4_k / q4_K, q4_0 / q4_0, q8_0 / q8_0
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/script-help.sh" # -h/--help: the comment above, exit 0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ggml="${1:?usage: tools/bench-vs-ggml.sh GGML_SRC_DIR [BUILD_DIR]}"
build="${2:-$root/build}"
# ggml's test-backend-ops runs std::thread::hardware_concurrency() threads: the online CPUs, even
# where an affinity mask (taskset, a cpuset) allows fewer, which is all nproc counts
threads="$(getconf _NPROCESSORS_ONLN)"
repeat="${REPEAT:-3}"
rows=4096 cols=14336
pairs=("nf2 q2_K" "int4 q4_K" "nf4 iq4_nl" "bf16 bf16" "q4_k q4_K" "q4_0 q4_0" "q8_0 q8_0")
batches=(1 2 4 8)

ggml_bin="$ggml/build-bench/bin/test-backend-ops"
if [ ! -x "$ggml_bin" ]; then
    echo "building ggml's test-backend-ops in $ggml/build-bench ..." >&2
    cmake -S "$ggml" -B "$ggml/build-bench" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_BUILD_TESTS=ON \
        -DGGML_BUILD_EXAMPLES=OFF >/dev/null
    cmake --build "$ggml/build-bench" -j"$threads" --target test-backend-ops >/dev/null
fi
ours="$build/personaplex-bench"
[ -x "$ours" ] || { echo "bench-vs-ggml: $ours not built (cmake --build $build --target personaplex-bench)" >&2; exit 1; }

# The smaller of two numbers, either possibly empty (no figure).
least() { printf '%s\n' "$@" | awk 'NF && (m == "" || $1 < m) { m = $1 } END { print m }'; }
# ggml: microseconds per run of MUL_MAT(type_a=TYPE, m=rows, n=BATCH, k=cols)
ggml_us() {
    "$ggml_bin" perf -o MUL_MAT -b CPU -p "type_a=$1,type_b=f32,m=$rows,n=$2,k=$cols," 2>/dev/null |
        sed -nE 's/.* ([0-9.]+) us\/run.*/\1/p' | head -n 1
}
# ours: milliseconds per product of FORMAT at batch BATCH
ours_ms() {
    "$ours" gemv --threads "$threads" --batch "$2" --seconds 1 --in-cache --shape "${rows}x${cols}" --formats "$1" |
        awk -v f="$1" '$4 == f { print $6 }'
}

echo "shape ${rows} x ${cols}, $threads threads; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
printf "%-6s %-7s %5s %12s %12s %12s %12s %7s\n" format ggml batch "ours ms" "ggml ms" "ours Gw/s" "ggml Gw/s" ratio
missing=0
for pair in "${pairs[@]}"; do
    read -r ours_fmt ggml_type <<<"$pair"
    for n in "${batches[@]}"; do
        ms="" us=""
        for _ in $(seq "$repeat"); do
            ms="$(least "$ms" "$(ours_ms "$ours_fmt" "$n")")"
            us="$(least "$us" "$(ggml_us "$ggml_type" "$n")")"
        done
        if [ -z "$ms" ] || [ -z "$us" ]; then
            printf "%-6s %-7s %5s   (no figure: ours '%s', ggml '%s')\n" "$ours_fmt" "$ggml_type" "$n" "$ms" "$us"
            missing=$((missing + 1))
            continue
        fi
        awk -v f="$ours_fmt" -v g="$ggml_type" -v n="$n" -v ms="$ms" -v us="$us" -v w=$((rows * cols)) 'BEGIN {
            ours = w / ms / 1e6; theirs = w / (us / 1e3) / 1e6
            printf "%-6s %-7s %5d %12.3f %12.3f %12.2f %12.2f %7.2f\n", f, g, n, ms, us / 1e3, ours, theirs, ours / theirs }'
    done
done
if [ "$missing" -gt 0 ]; then
    echo "bench-vs-ggml: $missing of $((${#pairs[@]} * ${#batches[@]})) rows without a figure ($ggml_bin or $ours printed none)" >&2
    exit 1
fi
