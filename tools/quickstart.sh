#!/usr/bin/env bash
# Quick start on Debian 12 (as root): installs the dependencies, builds everything in build/
# and starts the server with its bundled demo model. Extra arguments go to the server.
#   tools/quickstart.sh                   then open the URL the server prints
#   PP_CUDA=OFF tools/quickstart.sh       CPU-only build even when a CUDA toolkit is installed
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

tools/install-deps.sh
cmake -S . -B build -DPP_CUDA="${PP_CUDA:-AUTO}"
cmake --build build -j"$(nproc)"

if [ -x build/personaplex-server ]; then
    exec build/personaplex-server --demo "$@"
fi

echo "quickstart: build/personaplex-server is not built yet (src/server is incomplete)."
if [ -x build/personaplex-golden ]; then
    echo "quickstart: running the engine on the bundled golden cases instead:"
    status=0
    for dir in tests/data/golden/*/; do
        [ -f "$dir/golden.safetensors" ] || continue
        build/personaplex-golden "${dir%/}" || status=1
    done
    exit "$status"
fi
exit 1
