#!/usr/bin/env bash
# Quick start on Debian 12 (as root): installs the dependencies, builds everything in build/
# and starts the server: with its bundled demo model unless the arguments give --weights or
# --models-dir. Extra arguments go to the server.
#   tools/quickstart.sh                   then open the URL the server prints
#   tools/quickstart.sh --weights model-turbo2bit.safetensors --voice NATF2
#   PP_CUDA=OFF tools/quickstart.sh       CPU-only build even when a CUDA toolkit is installed
# The server's own options are in build/personaplex-server --help once it is built.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/script-help.sh" # -h/--help: the comment above, exit 0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

tools/install-deps.sh
cmake -S . -B build -DPP_CUDA="${PP_CUDA:-AUTO}"
cmake --build build -j"$(nproc)"

# the demo model unless the arguments name a checkpoint
demo=--demo
for arg in "$@"; do
    case "$arg" in --weights|--weights=*|--models-dir|--models-dir=*) demo= ;; esac
done
exec build/personaplex-server $demo "$@"
