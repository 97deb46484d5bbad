#!/usr/bin/env bash
# Cross-checks the CPU part for aarch64 (Jetson, Grace, ARM servers) with Debian's cross
# compiler, so an x86-only construct in the engine shows up in CI, not on the device.
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
# Exit status: 0 ok, 1 a compile or link error, 77 the cross compiler is not installed
# (apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu; tools/install-deps.sh does).
set -euo pipefail

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
echo "cross-check: ok: ${#sources[@]} sources, libpp.a and personaplex-inspect for aarch64 ($kind) in $((SECONDS - start)) s"
