#!/usr/bin/env bash
# Downloads the published PersonaPlex model files into the directory personaplex-server looks
# in by default, resuming interrupted downloads and checking each file's size, then SHA-256,
# against tools/weights.sha256 (installed as share/personaplex/weights.sha256), from the
# repository revision that manifest pins.
#
#   tools/fetch-weights.sh [--format 2bit|nf4|bf16|gguf-24l] [--dir DIR] [--no-voices]
#                          [--web-client] [--trust-on-first-use] [--check]
#
#   --format F      which LM checkpoint: 2bit (model-turbo2bit, 2.07 GB, the default), nf4
#                   (model-nf4, 4.14 GB), bf16 (model.safetensors, 16.7 GB, gated; the server
#                   can quantise it while loading: --quantize) or gguf-24l (sts-web's 24-layer
#                   Q4_K GGUF in 8 shards, 3.5 GB)
#   --dir DIR       where to put them. Default: $PERSONAPLEX_MODELS, else
#                   /var/lib/personaplex/models as root, else
#                   ${XDG_DATA_HOME:-~/.local/share}/personaplex/models
#   --no-voices     skip voices.tgz (the 18 voice prompts; gated: needs HF_TOKEN)
#   --web-client    also fetch the official web client (dist.tgz, gated) into DIR/web-client,
#                   to serve with --static-dir
#   --trust-on-first-use
#                   accept downloads that have no published hash in weights.sha256 and
#                   record the hash computed now in DIR/weights.local.sha256; later runs
#                   check the files against that record
#   --check         download nothing, write nothing unless --trust-on-first-use records a
#                   hash (a read-only DIR will do); verify what is in DIR and print a table
#                   of each file and what it was verified against
#
# Every run ends with that table: "manifest" (the published size and SHA-256), "local
# record" (the hash recorded on first use: it proves the file did not change since, not that
# it is the published one) or "NOT VERIFIED".
#
# Gated repositories (nvidia/personaplex-7b-v1) need a Hugging Face token of an account that
# accepted the licence: HF_TOKEN, or the file ~/.cache/huggingface/token. The token goes to
# curl through a pipe, never on its command line. HF_ENDPOINT (default https://huggingface.co)
# selects a mirror. Exit status: 0 all files verified, 1 an error or a mismatch, 2 usage,
# 3 some files are downloaded but unverified (see --trust-on-first-use).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
manifest="${WEIGHTS_MANIFEST:-}"
if [ -z "$manifest" ]; then
    for m in "$here/weights.sha256" "$here/../share/personaplex/weights.sha256"; do
        if [ -f "$m" ]; then manifest="$m"; break; fi
    done
fi
endpoint="${HF_ENDPOINT:-https://huggingface.co}"
format=2bit
voices=1
web_client=0
tofu=0
check_only=0
dir="${PERSONAPLEX_MODELS:-}"

usage() { sed -n '2,/^set -euo/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; } # the comment above
die() { echo "fetch-weights: $*" >&2; exit 1; }
# An option's value must follow it (a bare `shift 2` would end the script, status 1, silently).
need_value() { [ "$2" -ge 2 ] || { echo "fetch-weights: $1 needs a value (see --help)" >&2; exit 2; }; }

while [ $# -gt 0 ]; do
    case "$1" in
    --format) need_value "$1" $#; format="$2"; shift 2 ;;
    --format=*) format="${1#*=}"; shift ;;
    --dir) need_value "$1" $#; dir="$2"; shift 2 ;;
    --dir=*) dir="${1#*=}"; shift ;;
    --no-voices) voices=0; shift ;;
    --web-client) web_client=1; shift ;;
    --trust-on-first-use) tofu=1; shift ;;
    --check) check_only=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "fetch-weights: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$format" in 2bit | nf4 | bf16 | gguf-24l) ;; *) echo "fetch-weights: --format is 2bit, nf4, bf16 or gguf-24l" >&2; exit 2 ;; esac
[ -n "$manifest" ] && [ -f "$manifest" ] || die "cannot find weights.sha256 (set WEIGHTS_MANIFEST)"
if [ -z "$dir" ]; then
    if [ "$(id -u)" = 0 ]; then dir=/var/lib/personaplex/models
    else dir="${XDG_DATA_HOME:-$HOME/.local/share}/personaplex/models"; fi
fi
command -v sha256sum >/dev/null || die "sha256sum is missing (coreutils)"
[ "$check_only" = 1 ] || command -v curl >/dev/null || die "curl is missing (apt-get install curl)"
local_db="$dir/weights.local.sha256"
# --check writes nothing of its own: a read-only models volume can be checked, a mistyped DIR is
# not created.
if [ "$check_only" = 1 ]; then
    [ -d "$dir" ] || die "$dir: no such directory (nothing to check)"
else
    mkdir -p "$dir"
    touch "$local_db"
fi

token="${HF_TOKEN:-}"
if [ -z "$token" ] && [ -f "$HOME/.cache/huggingface/token" ]; then token="$(cat "$HOME/.cache/huggingface/token")"; fi

# The published hash and size of a file name (the first row that has either; "-" for the
# other), or nothing; the locally recorded hash, or nothing.
published() {
    awk -v f="$1" '$1 !~ /^#/ { n = split($2, p, "/") }
                   $1 !~ /^#/ && p[n] == f && ($7 != "-" || $6 != "-") { print $7, $6; exit }' "$manifest"
}
recorded() { [ ! -f "$local_db" ] || awk -v f="$1" '$1 == f { print $2; exit }' "$local_db"; }

# Downloads repo@rev/path into dir/file.part, resuming a partial one; gated repos get the token.
download() {
    local repo="$1" rev="$2" path="$3" file="$4" gated="$5" url="$endpoint/$1/resolve/$2/$3"
    if [ "$gated" = yes ] && [ -z "$token" ]; then
        echo "fetch-weights: $file comes from the gated repository $repo: accept its licence on" \
            "huggingface.co and set HF_TOKEN (or skip it: --no-voices / another --format)" >&2
        return 1
    fi
    echo "== $file <- $url"
    local opts=(-fL --retry 5 --retry-delay 3 -C - -o "$dir/$file.part" "$url")
    if [ -n "$token" ]; then
        printf 'header = "Authorization: Bearer %s"\n' "$token" | curl -K - "${opts[@]}"
    else
        curl "${opts[@]}"
    fi
}

# The run's table: one "file|bytes|how it was verified" line per file.
report=()
note() { report+=("$1|$2|$3"); }

# Verifies dir/name against the manifest or the local record, the size before the hash. 0
# verified, 3 no hash known, 1 mismatch. With tofu, an unknown hash is recorded and counts as
# verified. Adds the file's line to the table.
verify() {
    local path="$1" file="$2" want="" size="" got have
    read -r want size <<<"$(published "$file")" || true
    [ "$want" = "-" ] && want=""
    have="$(stat -c %s "$path")"
    if [ -n "$size" ] && [ "$size" != "-" ] && [ "$size" != "$have" ]; then
        echo "fetch-weights: $file: $have bytes, weights.sha256 says $size (not hashed)" >&2
        note "$file" "$have" "FAILED: size differs from the manifest"
        return 1
    fi
    echo "   hashing $file ($have bytes)"
    got="$(sha256sum "$path" | cut -d' ' -f1)"
    if [ -n "$want" ]; then
        if [ "$got" = "$want" ]; then
            echo "   verified $file (published SHA-256)"
            note "$file" "$have" "manifest"
            return 0
        fi
        echo "fetch-weights: $file: SHA-256 $got does not match the published $want" >&2
        note "$file" "$have" "FAILED: SHA-256 differs from the manifest"
        return 1
    fi
    local rec
    rec="$(recorded "$file")"
    if [ -n "$rec" ]; then
        if [ "$got" = "$rec" ]; then
            echo "   verified $file (against the hash recorded on first use)"
            note "$file" "$have" "local record (no published hash)"
            return 0
        fi
        echo "fetch-weights: $file: SHA-256 $got differs from the one recorded on first use ($rec)" >&2
        note "$file" "$have" "FAILED: SHA-256 differs from the local record"
        return 1
    fi
    if [ "$tofu" = 1 ]; then
        printf '%s %s %s %s\n' "$file" "$got" "$have" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$local_db"
        echo "   recorded $file SHA-256 $got (trust on first use: NOT checked against a published hash)"
        note "$file" "$have" "local record, made now (trust on first use)"
        return 0
    fi
    note "$file" "$have" "NOT VERIFIED (no published hash; see --trust-on-first-use)"
    echo "fetch-weights: $file: no published SHA-256 in $manifest, so it cannot be verified." >&2
    echo "   Its SHA-256 is $got. Compare it with the file page on huggingface.co, then re-run with" >&2
    echo "   --trust-on-first-use to accept it (it stays $file.unverified until then)." >&2
    return 3
}

# Unpacks dir/archive into a fresh dir/dest/ (swapped in whole at the end): its regular files,
# flat when flat=1 (voices.tgz nests them), else as the tree below the archive's top folder.
unpack() {
    local archive="$1" dest="$2" flat="$3" tmp
    tmp="$(mktemp -d "$dir/.unpack.XXXXXX")"
    tar -xzf "$dir/$archive" -C "$tmp" --no-same-owner --no-same-permissions
    rm -rf "${dir:?}/$dest.new"
    mkdir -p "$dir/$dest.new"
    if [ "$flat" = 1 ]; then
        find "$tmp" -type f \( -name '*.pt' -o -name '*.wav' \) -exec mv -f {} "$dir/$dest.new/" \;
    else
        (cd "$tmp"/* && find . -type f -exec cp --parents {} "$dir/$dest.new/" \;)
    fi
    rm -rf "$tmp" "${dir:?}/$dest"
    mv "$dir/$dest.new" "$dir/$dest"
    echo "   $(find "$dir/$dest" -type f | wc -l) files in $dir/$dest"
}

status=0
unverified=0
while read -r set path repo rev gated _; do
    case "$set" in
    "$format") ;;
    voices) [ "$voices" = 1 ] || continue ;;
    client) [ "$web_client" = 1 ] || continue ;;
    *) continue ;;
    esac
    file="${path##*/}"
    final="$dir/$file"
    if [ ! -f "$final" ] && [ "$check_only" = 0 ]; then
        if [ ! -f "$final.unverified" ]; then
            download "$repo" "$rev" "$path" "$file" "$gated" || { status=1; continue; }
            mv -f "$final.part" "$final.unverified"
        fi
        rc=0
        verify "$final.unverified" "$file" || rc=$?
        case "$rc" in
        0) mv -f "$final.unverified" "$final" ;;
        3) unverified=$((unverified + 1)); continue ;;
        *) status=1; echo "   left as $final.unverified: delete it to download again" >&2; continue ;;
        esac
    elif [ -f "$final" ]; then
        rc=0
        verify "$final" "$file" || rc=$?
        case "$rc" in 0) ;; 3) unverified=$((unverified + 1)); continue ;; *) status=1; continue ;; esac
    else
        echo "fetch-weights: $file is missing from $dir" >&2
        note "$file" "-" "MISSING"
        status=1
        continue
    fi
    [ "$check_only" = 1 ] && continue
    case "$file" in
    voices.tgz) unpack voices.tgz voices 1 ;;
    dist.tgz) unpack dist.tgz web-client 0 ;;
    esac
done < <(grep -v '^#' "$manifest" | grep -v '^[[:space:]]*$')

echo
printf '%-46s %14s  %s\n' file bytes "verified against"
for line in "${report[@]}"; do
    IFS='|' read -r f b how <<<"$line"
    printf '%-46s %14s  %s\n' "$f" "$b" "$how"
done
if [ "$status" = 0 ] && [ "$unverified" = 0 ]; then
    echo "fetch-weights: $format files verified in $dir"
    case "$format" in
    gguf-24l) echo "   start: personaplex-server --models-dir $dir --weights $dir/personaplex-24L-q4_k.gguf.shard-00" ;;
    *) echo "   start: personaplex-server --models-dir $dir   (or leave it out: it is a default place)" ;;
    esac
fi
[ "$status" = 0 ] || exit 1
[ "$unverified" = 0 ] || exit 3
exit 0
