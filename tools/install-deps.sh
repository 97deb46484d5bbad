#!/usr/bin/env bash
# Installs the Debian 12 packages personaplex-server builds and tests with. Idempotent: it
# installs only what is missing and runs `apt-get update` only when a package cannot be found.
# Runs as root with no TTY (or through sudo when not root).
#   tools/install-deps.sh              core + proxy groups (what tools/test.sh needs)
#   tools/install-deps.sh --browser    also the browser-test group
#   tools/install-deps.sh --all        every group
#   tools/install-deps.sh --check      only report what is missing (exit 1 if anything is)
set -euo pipefail

# ==== package lists: append new dependencies here (one group per line, keep a comment) ====
CORE_PACKAGES=(
    build-essential cmake pkg-config            # compiler, build system
    clang libclang-rt-14-dev                    # libFuzzer targets (tools/run-fuzzers.sh)
    clang-tools-14                              # static analyzer, scan-build (tools/analyze.sh)
    libwebsockets-dev libssl-dev openssl        # server transport, TLS
    libsentencepiece-dev                        # text tokenizer
    libopus-dev libogg-dev opus-tools           # audio codec, Ogg pages, test fixtures
    libwebrtc-audio-processing-dev              # echo cancellation (--echo-cancel)
    libsystemd-dev                              # sd_notify readiness for the systemd unit
    zlib1g-dev                                  # voice .pt archives: CRC-32, DEFLATE entries
    gcc-aarch64-linux-gnu g++-aarch64-linux-gnu # tools/cross-check.sh (aarch64 engine build)
    qemu-user                                   # tools/cross-check.sh (NEON tests, golden cases on aarch64)
    systemd curl file python3                   # unit verify, fetch-weights, deploy tests
)
PROXY_PACKAGES=(
    nginx                                       # reverse-proxy test
)
BROWSER_PACKAGES=(
    chromium nodejs npm                         # browser (web client) tests
)
# ==== end of package lists ====

groups=(core proxy)
check_only=0
for arg in "$@"; do
    case "$arg" in
    --browser) groups+=(browser) ;;
    --all) groups=(core proxy browser) ;;
    --check) check_only=1 ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install-deps: unknown option '$arg'" >&2; exit 2 ;;
    esac
done

wanted=()
for g in "${groups[@]}"; do
    case "$g" in
    core) wanted+=("${CORE_PACKAGES[@]}") ;;
    proxy) wanted+=("${PROXY_PACKAGES[@]}") ;;
    browser) wanted+=("${BROWSER_PACKAGES[@]}") ;;
    esac
done

# Node.js often comes from elsewhere than Debian (NodeSource's nodejs bundles npm and conflicts
# with Debian's npm package): a working command is as good as the Debian package.
declare -A PROVIDED_BY_COMMAND=([nodejs]=node [npm]=npm)

missing=()
for p in "${wanted[@]}"; do
    cmd="${PROVIDED_BY_COMMAND[$p]:-}"
    if [ -n "$cmd" ] && command -v "$cmd" >/dev/null; then continue; fi
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-deps: all ${#wanted[@]} packages present"
    exit 0
fi
echo "install-deps: missing: ${missing[*]}"
[ "$check_only" -eq 1 ] && exit 1

if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null; then
    sudo=(sudo)
else
    echo "install-deps: run as root (or install sudo)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt_install() {
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}
# An empty or stale package index makes the install fail; refresh it then, and only then.
if ! apt_install; then
    "${sudo[@]}" apt-get update
    apt_install
fi
echo "install-deps: done"
