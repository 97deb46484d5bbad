#!/bin/sh
# personaplex-convert stopping on an unreadable voice (a voices/BAD.bin cut to 10 bytes) must
# fail with the voice named and free what it allocated: run under valgrind's leak check, and
# judged by its leak summary alone (a CUDA build's dlopen of the driver draws valgrind reports
# inside ld.so that are not ours). Skipped (77) where valgrind is not installed.
#   convert_error_leak.sh PERSONAPLEX_CONVERT BUNDLE_DIR
set -u
convert="$1" bundle="$2"
command -v valgrind >/dev/null || { echo "valgrind not installed: skipped"; exit 77; }
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT
cp -r "$bundle" "$d/b"
head -c 10 "$d/b/voices/NATF2.bin" >"$d/b/voices/BAD.bin"
valgrind --leak-check=full --show-leak-kinds=definite "$convert" "$d/b" "$d/out" 2>"$d/log"
rc=$?
cat "$d/log"
[ "$rc" -eq 1 ] || { echo "exit status $rc, expected 1"; exit 1; }
grep -q "BAD.bin" "$d/log" || { echo "the error does not name BAD.bin"; exit 1; }
# "definitely lost: N bytes" appears only when some block was; "All heap blocks were freed" or
# a summary without it means none
grep -q "LEAK SUMMARY\|All heap blocks were freed" "$d/log" || { echo "valgrind printed no leak summary"; exit 1; }
if grep -q "definitely lost: [1-9]" "$d/log"; then echo "definite leak (above)"; exit 1; fi
