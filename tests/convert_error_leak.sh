#!/bin/sh
# personaplex-convert stopping on an unreadable voice (a voices/BAD.bin cut to 10 bytes) must
# fail with the voice named and free what it allocated.
#   convert_error_leak.sh PERSONAPLEX_CONVERT BUNDLE_DIR [asan]
# A sanitizer build (asan) is its own leak check (LeakSanitizer reports at exit, keeping a
# failing run's status), and valgrind cannot run it. Otherwise valgrind's leak check, judged by its leak summary
# alone (a CUDA build's dlopen of the driver draws valgrind reports inside ld.so that are not
# ours); skipped (77) where valgrind is not installed.
set -u
convert="$1" bundle="$2" build="${3:-plain}"
if [ "$build" != asan ]; then
    command -v valgrind >/dev/null || { echo "valgrind not installed: skipped"; exit 77; }
fi
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT
cp -r "$bundle" "$d/b"
head -c 10 "$d/b/voices/NATF2.bin" >"$d/b/voices/BAD.bin"
if [ "$build" = asan ]; then
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1" "$convert" "$d/b" "$d/out" 2>"$d/log"
else
    valgrind --leak-check=full --show-leak-kinds=definite "$convert" "$d/b" "$d/out" 2>"$d/log"
fi
rc=$?
cat "$d/log"
[ "$rc" -eq 1 ] || { echo "exit status $rc, expected 1"; exit 1; }
grep -q "BAD.bin" "$d/log" || { echo "the error does not name BAD.bin"; exit 1; }
if [ "$build" = asan ]; then
    if grep -q "LeakSanitizer" "$d/log"; then echo "leak (above)"; exit 1; fi
    exit 0
fi
# "definitely lost: N bytes" appears only when some block was; "All heap blocks were freed" or
# a summary without it means none
grep -q "LEAK SUMMARY\|All heap blocks were freed" "$d/log" || { echo "valgrind printed no leak summary"; exit 1; }
if grep -q "definitely lost: [1-9]" "$d/log"; then echo "definite leak (above)"; exit 1; fi
