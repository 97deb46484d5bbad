#!/bin/sh
# personaplex-convert stopping on an unreadable voice (a voices/BAD.bin cut to 10 bytes) must
# fail with the voice named and free what it allocated: run under valgrind's leak check, which
# counts a definite leak as an error. Skipped (77) where valgrind is not installed.
#   convert_error_leak.sh PERSONAPLEX_CONVERT BUNDLE_DIR
set -u
convert="$1" bundle="$2"
command -v valgrind >/dev/null || { echo "valgrind not installed: skipped"; exit 77; }
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT
cp -r "$bundle" "$d/b"
head -c 10 "$d/b/voices/NATF2.bin" >"$d/b/voices/BAD.bin"
valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 "$convert" "$d/b" "$d/out" \
    2>"$d/log"
rc=$?
cat "$d/log"
[ "$rc" -eq 1 ] || { echo "exit status $rc, expected 1 (99: valgrind found a leak)"; exit 1; }
grep -q "BAD.bin" "$d/log" || { echo "the error does not name BAD.bin"; exit 1; }
