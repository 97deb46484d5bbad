#!/usr/bin/env bash
# analyze: the clang static analyzer (scan-build) over a CPU build of everything we compile (the
# library, server, tools, tests and the emulated CUDA device), its reports compared with
# tools/analyze-known.txt, the reports read and found false.
#   tools/analyze.sh [DIR]    DIR default build-analyze/ (emptied first)
# Exit 0 when every report is a known one and every known one still occurs (so a fixed one leaves
# the list), 1 otherwise, printing the new and stale lines; 77 without scan-build (clang-tools).
# A report is compared as "path: message [checker]": line numbers move with every edit.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/script-help.sh" # -h/--help: the comment above, exit 0

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/build-analyze}"
known="$root/tools/analyze-known.txt"
jobs="${JOBS:-$(nproc)}"
scan="$(command -v scan-build-14 || command -v scan-build)" || {
    echo "analyze: skipped, no scan-build (Debian: clang-tools-14)"
    exit 77
}
cc="$(command -v clang-14 || command -v clang)"
cxx="$(command -v clang++-14 || command -v clang++)"

rm -rf "$dir"
mkdir -p "$dir"
log="$dir/scan-build.log"
# deadcode.DeadStores stays on: a value stored and never read is dead code.
if ! "$scan" -o "$dir/report" --use-cc="$cc" --use-c++="$cxx" \
    sh -c "cmake -S '$root' -B '$dir/tree' -DPP_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null &&
           cmake --build '$dir/tree' -j$jobs" >"$log" 2>&1; then
    grep -E "error" "$log" | head -n 20
    echo "analyze: the build failed (log: $log)"
    exit 1
fi

found="$(grep -E '^[^ :]+:[0-9]+:[0-9]+: warning: ' "$log" |
    sed -E "s#^$root/##; s#^([^:]+):[0-9]+:[0-9]+: warning: #\1: #" | sort -u)"
listed="$(grep -vE '^(#|$)' "$known" | sed 's/ | .*//' | sort -u)"
new="$(comm -23 <(printf '%s\n' "$found" | sed '/^$/d') <(printf '%s\n' "$listed" | sed '/^$/d'))"
stale="$(comm -13 <(printf '%s\n' "$found" | sed '/^$/d') <(printf '%s\n' "$listed" | sed '/^$/d'))"
reports="$(printf '%s\n' "$found" | sed '/^$/d' | wc -l)"

status=0
if [ -n "$new" ]; then
    echo "analyze: reports not in tools/analyze-known.txt (fix them, or list them with why they are false):"
    while IFS= read -r report; do
        echo "  $report"
        grep -F "${report#*: }" "$log" | sed "s#^$root/##" | grep -F "${report%%: *}:" | head -n 3 | sed 's/^/    at /'
    done <<<"$new"
    status=1
fi
if [ -n "$stale" ]; then
    echo "analyze: listed in tools/analyze-known.txt but no longer reported (remove them):"
    printf '  %s\n' "$stale"
    status=1
fi
echo "analyze: $reports distinct reports, $(printf '%s\n' "$listed" | sed '/^$/d' | wc -l) known false;" \
    "$([ "$status" -eq 0 ] && echo ok || echo FAILED) (html: $dir/report)"
exit "$status"
