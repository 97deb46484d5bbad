#!/bin/sh
# Turns `personaplex-server --help` into the roff manual personaplex-server.1, so the man page
# is built from the same option table as the parser and cannot drift from it.
#   tools/deploy/help2man.sh SERVER_BINARY VERSION OUTPUT
# The help text's layout: SECTION headings at column 0, option groups at column 2, options
# ("--name ARG") at column 4 with their paragraphs at column 12, other text at column 4.
set -eu
server="$1" version="$2" out="$3"
"$server" --help | awk -v version="$version" '
function esc(s) {
    gsub(/\\/, "\\e", s)
    gsub(/-/, "\\-", s)
    if (s ~ /^[.'"'"']/) s = "\\&" s
    return s
}
BEGIN {
    print ".\\\" Generated from personaplex-server --help by tools/deploy/help2man.sh; do not edit."
    print ".TH PERSONAPLEX-SERVER 1 \"\" \"personaplex-server " version "\" \"User Commands\""
}
/^$/ { next }
/^[A-Z][A-Z ]*$/ { section = $0; print ".SH " $0; next }
/^  [^ ]/ { sub(/^ +/, ""); print ".SS " esc($0); next }
/^    --/ { sub(/^ +/, ""); print ".TP"; print ".B " esc($0); next }
section == "SYNOPSIS" || section == "EXAMPLES" { sub(/^ +/, ""); print ".nf"; print esc($0); print ".fi"; next }
{ sub(/^ +/, ""); print esc($0) }
' > "$out.tmp"
mv "$out.tmp" "$out"
