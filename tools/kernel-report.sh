#!/usr/bin/env bash
# kernel-report: registers, spills and shared memory of every kernel in kernels/, from ptxas,
# for the Jetson Orin (sm_87) and the H100/H200 (sm_90), without a GPU.
#   tools/kernel-report.sh [ARCHS]     default "87 90"; NVCC=path overrides the compiler
# Prints one line per kernel and architecture: registers, spill bytes (stores + loads), stack,
# static shared memory, and the resident warps per SM the registers allow (64 at most). Exits 1
# when a GEMV kernel (pk_gemv*) spills: its inner loop must keep every accumulator and every load
# in flight in registers. GEMV instances above 128 registers are marked but pass: the float
# template's 5..8-input instances measured faster with ~210 registers and 4 rows per warp than
# with 1 row in 64 (kernels/gemv.cu). Exits 77 without nvcc.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
archs="${1:-87 90}"
if [ ! -x "$nvcc" ]; then
    echo "kernel-report: no nvcc (set NVCC or install the CUDA toolkit); nothing to report" >&2
    exit 77
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

printf '%-6s %-58s %5s %7s %6s %7s %6s\n' arch kernel regs spill stack smem warps
bad=0
for arch in $archs; do
    for cu in "$root"/kernels/*.cu; do
        log="$tmp/$(basename "$cu").$arch.log"
        if ! "$nvcc" -arch="sm_$arch" -O3 -cubin -Xptxas -v -I"$root/kernels" -I"$root/src" -I"$root/include" \
            "$cu" -o "$tmp/out.cubin" >"$log" 2>&1; then
            cat "$log" >&2
            echo "kernel-report: $cu does not compile for sm_$arch" >&2
            exit 1
        fi
        # ptxas prints, per kernel: "Compiling entry function 'NAME'", then its stack and spill
        # line, then "Used N registers, ... N bytes smem".
        awk -v arch="$arch" '
            /Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2) }
            /bytes stack frame/ { stack = $1; spill = $5 + $9 }
            /Used [0-9]+ registers/ {
                regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
                smem = 0; if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART); sub(/ .*/, "", smem) }
                print arch, name, regs, spill, stack, smem
            }' "$log"
    done
done | sort -u -k2,2 -k1,1 | while read -r arch name regs spill stack smem; do
    short="$(c++filt "$name" 2>/dev/null || echo "$name")"
    short="${short%%(*}"
    # 64K registers per SM, allocated per warp in units of 256 (8 per thread)
    per_thread=$(((regs + 7) / 8 * 8))
    warps=$((65536 / (per_thread * 32)))
    [ "$warps" -gt 64 ] && warps=64
    flag=""
    if [[ "$name" == *pk_gemv* ]] && [ "$spill" -gt 0 ]; then
        flag="  <- spills"
        echo "$arch $short" >>"$tmp/bad"
    elif [[ "$name" == *pk_gemv* ]] && [ "$regs" -gt 128 ]; then
        flag="  (> 128 registers)"
    fi
    printf 'sm_%-3s %-58.58s %5s %7s %6s %7s %6s%s\n' "$arch" "$short" "$regs" "$spill" "$stack" "$smem" "$warps" "$flag"
done
if [ -s "$tmp/bad" ]; then
    echo "kernel-report: $(wc -l <"$tmp/bad") GEMV kernel instance(s) spill" >&2
    bad=1
else
    echo "kernel-report: no GEMV kernel spills (sm_${archs// /, sm_})"
fi
exit $bad
