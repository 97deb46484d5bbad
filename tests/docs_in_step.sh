#!/bin/sh
# docs_in_step: what the server offers and what its docs (README.md, docs/, its own --help) say it
# offers must be the same lists, so that neither a new option, query key, metric or environment
# variable goes undocumented nor a removed option stays in the docs.
#
# usage: docs_in_step.sh SOURCE_DIR SERVER_BINARY options|query|metrics|env
#   options  the manual's (--help) options and README's option table rows, both ways
#   query    every /api/chat query key src/session/params.c reads is in --help, README.md and
#            docs/protocol.md
#   metrics  every metric name src/server/ writes is named in README.md in full
#   env      every environment variable src/ reads is in the manual's ENVIRONMENT section, the CUDA
#            backend's PP_CUDA_* kernel switches (timing experiments) in docs/backend.md instead
set -u
src=$1 server=$2 check=$3
readme=$src/README.md
fail=0
missing() { echo "$1"; fail=1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

case $check in
options)
    "$server" --help | sed -n 's/^    --\([a-z0-9-]*\).*/\1/p' | sort -u > "$tmp/help"
    # the table's rows: "| `--name ARG` |" or "| `--cert FILE`, `--key FILE` |"
    grep '^| `--' "$readme" | cut -d'|' -f2 | grep -o '`--[a-z0-9-]*' | cut -c4- | sort -u > "$tmp/table"
    for o in $(comm -23 "$tmp/help" "$tmp/table"); do
        missing "README.md's option table lacks --$o (listed by --help)"
    done
    for o in $(comm -13 "$tmp/help" "$tmp/table"); do
        missing "README.md's option table has --$o, which --help does not list"
    done
    ;;
query)
    keys=$(sed -n 's/.*strcmp(key, "\([a-z_]*\)").*/\1/p' "$src/src/session/params.c")
    test -n "$keys" || missing "no query keys found in src/session/params.c"
    endpoints=$("$server" --help | sed -n '/^ENDPOINTS/,/^FILES/p')
    for k in $keys; do
        echo "$endpoints" | grep -qw "$k" || missing "--help's ENDPOINTS lack the query key $k"
        grep -q "\`$k\`" "$readme" || missing "README.md lacks the query key $k"
        grep -q "\`$k\`" "$src/docs/protocol.md" || missing "docs/protocol.md lacks the query key $k"
    done
    ;;
metrics)
    names=$(cat "$src"/src/server/*.c | grep -o '"personaplex_[a-z_]*' | cut -c2- \
            | sed 's/_\(count\|sum\|bucket\)$//' | sort -u)
    test -n "$names" || missing "no metric names found in src/server/"
    for n in $names; do
        grep -qw "$n" "$readme" || missing "README.md does not name the metric $n"
    done
    ;;
env)
    # getenv("NAME"), cuda.c's env_integer("NAME", ...) and its {"NAME", setter} switch table
    names=$(cat "$src"/src/*/*.c | grep -oE '(getenv|env_integer)\("[A-Z][A-Z0-9_]*"|\{"PP_[A-Z0-9_]*",' \
            | grep -oE '"[A-Z0-9_]*"' | tr -d '"' | sort -u)
    test -n "$names" || missing "no environment variables found in src/"
    environment=$("$server" --help | sed -n '/^ENVIRONMENT/,/^EXAMPLES/p')
    for n in $names; do
        case $n in
        PP_CUDA_*) grep -qw "$n" "$src/docs/backend.md" || missing "docs/backend.md does not name $n" ;;
        *) echo "$environment" | grep -qw "$n" || missing "--help's ENVIRONMENT lacks $n" ;;
        esac
    done
    ;;
*)
    echo "usage: $0 SOURCE_DIR SERVER_BINARY options|query|metrics|env" >&2
    exit 2
    ;;
esac
exit $fail
