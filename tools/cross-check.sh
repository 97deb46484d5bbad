#!/usr/bin/env bash
# Cross-checks the CPU part for aarch64 (Jetson, Grace, ARM servers) with Debian's cross
# compiler, so an x86-only construct in the engine shows up in CI, not on the device, and runs
# the NEON code under qemu-user so its numbers are checked too.
#
#   tools/cross-check.sh [BUILD_DIR]      default BUILD_DIR: build-cross-aarch64
#
# What it does, and why this much: every source of the engine library (the CMake glob of
# src/{base,io,backend,model,session,audio,text}) is compiled with aarch64-linux-gnu-gcc/g++
# and the project's warning flags, archived, and personaplex-inspect is linked against it.
# That link needs only libc, libm and pthreads, which the cross toolchain ships, so no arm64
# -dev packages are needed (the headers of opus, ogg, zlib and sentencepiece the library
# includes are architecture-independent). A full cross build of the server (libwebsockets,
# OpenSSL, ... for arm64) needs `dpkg --add-architecture arm64` and the :arm64 -dev packages;
# the Jetson section of README "Deploy" builds natively on the device instead.
# Then, under qemu-aarch64, statically linked: test_cpu_simd (the NEON loops against the
# portable ones) and personaplex-golden on every golden case of tests/data/golden, with the
# NEON loops and with PP_CPU_SIMD=portable. Those two links need zlib, which has no arm64
# package without multiarch; the archive reader's zlib calls get a stand-in (a real CRC-32,
# and an inflate that refuses: no golden case holds a DEFLATE entry).
# Exit status: 0 ok, 1 a compile, link or test failure, 77 the cross compiler (or qemu-user)
# is not installed (apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user;
# tools/install-deps.sh does).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/script-help.sh" # -h/--help: the comment above, exit 0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/build-cross-aarch64}"
cc=aarch64-linux-gnu-gcc
cxx=aarch64-linux-gnu-g++
if ! command -v "$cc" >/dev/null || ! command -v "$cxx" >/dev/null; then
    echo "cross-check: $cc / $cxx not installed (apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu)"
    exit 77
fi
mkdir -p "$out/obj"
rm -f "$out"/obj/*.o "$out/libpp.a" "$out/personaplex-inspect"
version="$(sed -nE 's/^project\(personaplex VERSION ([0-9.]+).*/\1/p' "$root/CMakeLists.txt")"
# The dependencies' include paths from the host's pkg-config: those headers are the same on
# every architecture (the libraries themselves are not, hence no link against them).
deps="$(pkg-config --cflags opus ogg sentencepiece zlib 2>/dev/null || echo -I/usr/include/opus)"
common=(-O2 -Wall -Wextra -I"$root/src" -I"$root/include" -I"$root/kernels" -D_POSIX_C_SOURCE=200809L
        "-DPP_VERSION=\"$version\"" "-DPP_CUDA_ARCHS_STR=\"none\"" $deps)
export cc cxx out root
export COMMON="${common[*]}"

# One compiler call per source, in parallel; each prints its own diagnostics.
compile() {
    local src="$1" obj
    obj="$out/obj/$(echo "${src#"$root"/}" | tr / _).o"
    case "$src" in
    *.cc) eval "$cxx -std=c++17 $COMMON -c '$src' -o '$obj'" ;;
    *) eval "$cc -std=c11 -Wstrict-prototypes $COMMON -c '$src' -o '$obj'" ;;
    esac
}
export -f compile
start=$SECONDS
shopt -s nullglob
sources=("$root"/src/{base,io,backend,model,session,audio,text}/*.c "$root"/src/text/*.cc)
echo "cross-check: compiling ${#sources[@]} engine sources for aarch64 with $($cc -dumpfullversion)"
log="$out/compile.log"
if ! printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} bash -c 'compile "$@"' _ {} >"$log" 2>&1; then
    cat "$log"
    echo "cross-check: FAILED to compile for aarch64"
    exit 1
fi
if grep -q "warning:" "$log"; then
    cat "$log"
    echo "cross-check: FAILED: warnings on aarch64 (the x86 build must stay warning-free there too)"
    exit 1
fi
aarch64-linux-gnu-ar rcs "$out/libpp.a" "$out"/obj/*.o
# inspect reads safetensors and JSON only: from the archive the linker takes just those objects.
if ! eval "$cc -std=c11 $COMMON '$root/tools/inspect.c' '$out/libpp.a' -lm -lpthread -o '$out/personaplex-inspect'"; then
    echo "cross-check: FAILED to link personaplex-inspect for aarch64"
    exit 1
fi
kind="$(file -b "$out/personaplex-inspect" 2>/dev/null || echo "file(1) not installed")"
case "$kind" in
*aarch64* | *"file(1)"*) ;;
*) echo "cross-check: FAILED: personaplex-inspect is not an aarch64 binary: $kind"; exit 1 ;;
esac
echo "cross-check: ${#sources[@]} sources, libpp.a and personaplex-inspect for aarch64 ($kind) in $((SECONDS - start)) s"

if ! command -v qemu-aarch64 >/dev/null; then
    echo "cross-check: compiled and linked, but nothing run: qemu-aarch64 not installed (apt-get install qemu-user)"
    exit 77
fi
cat >"$out/zlib_stand_in.c" <<'ZLIB'
/* The aarch64 test binaries' zlib (see tools/cross-check.sh): CRC-32 computed bit by bit,
 * inflate refused, so a DEFLATE entry fails with the reader's own error message. */
#include <zlib.h>
uLong crc32(uLong crc, const Bytef *buf, uInt len) {
    if (!buf) return 0;
    crc = ~crc & 0xffffffffu;
    for (uInt i = 0; i < len; i++) {
        crc ^= buf[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc & 0xffffffffu;
}
int inflateInit2_(z_streamp strm, int bits, const char *version, int size) {
    (void)strm, (void)bits, (void)version, (void)size;
    return Z_STREAM_ERROR;
}
int inflate(z_streamp strm, int flush) {
    (void)strm, (void)flush;
    return Z_STREAM_ERROR;
}
int inflateEnd(z_streamp strm) {
    (void)strm;
    return Z_OK;
}
ZLIB
link_static() { # NAME SOURCES...: an aarch64 test binary, statically linked (qemu then needs no arm64 libc)
    local name="$1"
    shift
    eval "$cc -std=c11 $COMMON -I'$root/tests' -I'$root/tools' $* '$out/zlib_stand_in.c' '$out/libpp.a' -lm -lpthread \
        -static -o '$out/$name'" 2>&1 | grep -v "statically linked applications requires" || true
    [ -x "$out/$name" ] || { echo "cross-check: FAILED to link $name for aarch64"; exit 1; }
}
rm -f "$out/test_cpu_simd" "$out/personaplex-golden"
link_static test_cpu_simd "'$root/tests/test_cpu_simd.c'"
link_static personaplex-golden -DPP_GOLDEN_MIMI=1 "'$root/tools/golden.c'" "'$root/tools/golden_lm.c'" \
    "'$root/tools/golden_mimi.c'"
run_failed=0
if ! qemu-aarch64 "$out/test_cpu_simd" >"$out/test_cpu_simd.log" 2>&1; then
    cat "$out/test_cpu_simd.log"
    echo "cross-check: FAILED: test_cpu_simd under qemu-aarch64"
    run_failed=1
fi
tail -n 1 "$out/test_cpu_simd.log"
cases=0
for dir in "$root"/tests/data/golden/{lm,mimi}-* "$root"/tests/data/golden/heldout/*/; do
    [ -d "$dir" ] || continue
    for simd in neon portable; do
        if ! env PP_CPU_SIMD="$simd" qemu-aarch64 "$out/personaplex-golden" "$dir" >"$out/golden.log" 2>&1; then
            cat "$out/golden.log"
            echo "cross-check: FAILED: golden $(basename "$dir") ($simd) under qemu-aarch64"
            run_failed=1
        fi
        echo "$simd: $(tail -n 1 "$out/golden.log")"
    done
    cases=$((cases + 1))
done
[ "$run_failed" = 0 ] || exit 1
echo "cross-check: ok: ${#sources[@]} sources for aarch64; under qemu-aarch64 test_cpu_simd and $cases golden cases" \
    "(NEON and portable) passed in $((SECONDS - start)) s"
