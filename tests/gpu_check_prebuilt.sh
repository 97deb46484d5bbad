#!/usr/bin/env bash
# tools/gpu-check.sh PREBUILT=1 on a host that lacks a library the prebuilt programs load (as a
# bundle built against another CUDA's cuBLAS would): it must stop at once, naming the library,
# rather than fail every step with 127. And with every library there, it goes on to the steps.
# Runs without a GPU: a stand-in nvidia-smi, STEPS matching no step.
#   tests/gpu_check_prebuilt.sh SOURCE_DIR C_COMPILER
set -euo pipefail

src="${1:?usage: gpu_check_prebuilt.sh SOURCE_DIR C_COMPILER}" cc="${2:?}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tools" "$tmp/build-gpu" "$tmp/bin" "$tmp/lib"
cp "$src/tools/gpu-check.sh" "$src/tools/script-help.sh" "$tmp/tools/"
printf '#!/bin/sh\ncase "$*" in *compute_cap*) echo 9.0 ;; *) echo "GPU 0: stand-in" ;; esac\n' >"$tmp/bin/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi"

# a program that loads libppgone.so, which is then taken away
echo 'int pp_gone(void) { return 0; }' >"$tmp/gone.c"
echo 'int pp_gone(void); int main(void) { return pp_gone(); }' >"$tmp/main.c"
"$cc" -shared -fPIC -o "$tmp/lib/libppgone.so" "$tmp/gone.c"
"$cc" -o "$tmp/build-gpu/personaplex-golden" "$tmp/main.c" -L"$tmp/lib" -lppgone
rm "$tmp/lib/libppgone.so"

run() { PATH="$tmp/bin:$PATH" PREBUILT=1 STEPS='^no step$' bash "$tmp/tools/gpu-check.sh" 2>&1; }
set +e
out="$(run)"
rc=$?
set -e
echo "$out" | tail -n 5
[ "$rc" -eq 1 ] && echo "$out" | grep -q 'not on this host' && echo "$out" | grep -q 'personaplex-golden: libppgone.so' ||
    { echo "FAIL: a missing library went unnoticed (exit $rc)"; exit 1; }
echo "ok: the missing library is named before any step"

echo 'int main(void) { return 0; }' >"$tmp/plain.c"
"$cc" -o "$tmp/build-gpu/personaplex-golden" "$tmp/plain.c"
set +e
out="$(run)"
rc=$?
set -e
[ "$rc" -eq 0 ] && echo "$out" | grep -q 'SKIP (STEPS)' || { echo "FAIL: with every library there (exit $rc):"; echo "$out"; exit 1; }
echo "ok: with every library there the steps follow"
