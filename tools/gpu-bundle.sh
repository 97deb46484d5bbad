#!/usr/bin/env bash
# gpu-bundle: builds what tools/gpu-check.sh runs, for a GPU host that cannot build it (no -dev
# packages, no network), and packs it small enough to travel with the source tree.
#   tools/gpu-bundle.sh [OUT]    OUT default: .devcarry/bundle.tar.xz
#   PP_CUDA_ARCHS=90 (default)   the GPU's architecture (87 Jetson Orin, 89 Ada, 90 H100/H200)
# The bundle holds build-gpu/'s programs; in build-gpu/lib, the shared libraries they load but
# the C library's, the driver's and cuBLAS (the GPU host has its own driver and toolkit, which
# must be of the CUDA major version built with: the last line names the cuBLAS it needs); and in
# build-gpu/source-root, the source path they were built in (they find the test data and the web
# UI there; gpu-check links it to the tree it runs in). On the GPU host, in the source tree:
#   tar xJf .devcarry/bundle.tar.xz && PREBUILT=1 tools/gpu-check.sh
# A device call carries at most 64 MiB: move tests/data/golden/{lm-bf16,lm-q4k,heldout} out of the
# tree for it and carry .devcarry.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/script-help.sh" # -h/--help: the comment above, exit 0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-gpu"
out="${1:-$root/.devcarry/bundle.tar.xz}"
archs="${PP_CUDA_ARCHS:-90}"
programs=(personaplex-server personaplex-loadtest personaplex-bench personaplex-golden test_backend_parity
    test_backend_sample)

# The programs look in build-gpu/lib first, for their own libraries and those libraries' (DT_RPATH,
# unlike DT_RUNPATH, also serves the indirect ones), so nothing else on the host loads ours.
# shellcheck disable=SC2016 # $ORIGIN is the loader's, not the shell's
cmake -S "$root" -B "$build" -DPP_CUDA=ON -DPP_CUDA_ARCHS="$archs" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_BUILD_RPATH='$ORIGIN/lib;/usr/local/cuda/lib64' -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${programs[@]}"

# The libraries to carry: what the programs load, less the C library's own (every host has a
# compatible one), the driver's, and cuBLAS (hundreds of MB; the host's toolkit has it).
rm -rf "${build:?}/lib"
mkdir -p "$build/lib"
for program in "${programs[@]}"; do ldd "$build/$program"; done |
    awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
    grep -vE '/(ld-linux[^/]*|lib(c|m|dl|rt|pthread|util|resolv)\.so[^/]*|libcuda\.so[^/]*|libcublas[^/]*|libnvidia[^/]*)$' |
    while read -r lib; do cp -L "$lib" "$build/lib/"; done
printf '%s\n' "$root" >"$build/source-root"

mkdir -p "$(dirname "$out")"
tar -C "$root" -cJf "$out" "${programs[@]/#/build-gpu/}" build-gpu/lib build-gpu/source-root
# what the GPU host must have of its own: the CUDA major version's cuBLAS (gpu-check checks)
host_needs="$(for program in "${programs[@]}"; do ldd "$build/$program"; done | awk '$1 ~ /^libcublas/ { print $1 }' | sort -u | tr '\n' ' ')"
echo "gpu-bundle: $out ($(du -h "$out" | cut -f1); sm_$archs; libraries: $(cd "$build/lib" && echo *); the GPU host needs: ${host_needs:-nothing more})"
