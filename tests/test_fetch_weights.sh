#!/usr/bin/env bash
# test_fetch_weights: tools/fetch-weights.sh against a local file:// mirror laid out like
# huggingface.co (<repo>/resolve/<revision>/<file>) and a manifest written here, so every path
# runs without network: a published hash that matches (downloaded from the pinned revision),
# one that does not, a size that does not (refused before hashing), a file with no published
# hash (kept unverified, then accepted with --trust-on-first-use and checked against that
# record later), a file another set publishes under the same name (verified by that row),
# resuming a partial download, the gated repository without a token, voices.tgz unpacked into
# voices/, files in a repository folder (the GGUF shards), the --check table, the web client.
#   test_fetch_weights.sh PATH/TO/fetch-weights.sh
set -u
fetch="$1"
command -v curl >/dev/null || { echo "SKIPPED: curl is missing"; exit 77; }
work="$(mktemp -d /tmp/pp-fetch-XXXXXX)"
mirror="$work/mirror" models="$work/models" manifest="$work/weights.sha256"
passed=0
failed=0
check() {
    if eval "$2"; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi
}
# Runs the script with the mirror; prints its output into $work/out, returns its status.
run() { HF_ENDPOINT="file://$mirror" WEIGHTS_MANIFEST="$manifest" bash "$fetch" --dir "$models" "$@" >"$work/out" 2>&1; }

rev=fdaf4090a61cb315c138a1faee287ffd6c716309
mkdir -p "$mirror/org/open/resolve/main" "$mirror/org/gated/resolve/$rev" "$mirror/org/gguf/resolve/main/shards" \
    "$work/v/voices" "$work/c/dist/assets"
head -c 300000 /dev/urandom >"$mirror/org/open/resolve/main/model-turbo2bit.safetensors"
head -c 5000 /dev/urandom >"$mirror/org/open/resolve/main/tokenizer_spm_32k_3.model"
head -c 7000 /dev/urandom >"$mirror/org/open/resolve/main/tokenizer-e351c8d8-checkpoint125.safetensors"
cp "$mirror/org/open/resolve/main/tokenizer-e351c8d8-checkpoint125.safetensors" "$mirror/org/gated/resolve/$rev/"
head -c 100 /dev/urandom >"$work/v/voices/NATF0.pt"
head -c 100 /dev/urandom >"$work/v/voices/NATM1.pt"
tar -czf "$mirror/org/gated/resolve/$rev/voices.tgz" -C "$work/v" voices
echo '<html></html>' >"$work/c/dist/index.html"
echo 'x' >"$work/c/dist/assets/app.js"
tar -czf "$mirror/org/gated/resolve/$rev/dist.tgz" -C "$work/c" dist
head -c 4000 /dev/urandom >"$mirror/org/gguf/resolve/main/shards/m.gguf.shard-00"
head -c 3000 /dev/urandom >"$mirror/org/gguf/resolve/main/shards/m.gguf.shard-01"
head -c 6000 /dev/urandom >"$mirror/org/gguf/resolve/main/tokenizer-e351c8d8-checkpoint125.safetensors"
sha() { sha256sum "$1" | cut -d' ' -f1; }
model_sha="$(sha "$mirror/org/open/resolve/main/model-turbo2bit.safetensors")"
voices_sha="$(sha "$mirror/org/gated/resolve/$rev/voices.tgz")"
mimi_sha="$(sha "$mirror/org/gated/resolve/$rev/tokenizer-e351c8d8-checkpoint125.safetensors")"
client_sha="$(sha "$mirror/org/gated/resolve/$rev/dist.tgz")"
cat >"$manifest" <<EOF
# test manifest: set file repo revision gated size sha256
2bit     model-turbo2bit.safetensors                   org/open   main  no   300000  $model_sha
2bit     tokenizer_spm_32k_3.model                     org/open   main  no   -       -
2bit     tokenizer-e351c8d8-checkpoint125.safetensors  org/open   main  no   -       -
bf16     tokenizer-e351c8d8-checkpoint125.safetensors  org/gated  $rev  yes  7000    $mimi_sha
voices   voices.tgz                                    org/gated  $rev  yes  -       $voices_sha
client   dist.tgz                                      org/gated  $rev  yes  -       $client_sha
nf4      model-nf4.safetensors                         org/open   main  no   -       0000000000000000000000000000000000000000000000000000000000000000
gguf-24l shards/m.gguf.shard-00                        org/gguf   main  no   -       -
gguf-24l shards/m.gguf.shard-01                        org/gguf   main  no   999     -
gguf-24l tokenizer-e351c8d8-checkpoint125.safetensors  org/gguf   main  no   -       -
EOF

run --format bogus
check "a bad --format is a usage error (2)" "[ $? -eq 2 ]"
for opt in --format --dir; do
    run "$opt"
    check "$opt without a value is a usage error (2) that names it" "[ $? -eq 2 ] && grep -q -- '$opt needs a value' '$work/out'"
done

run
check "no token: the gated file fails (1)" "[ $? -eq 1 ] && grep -q HF_TOKEN '$work/out'"

HF_TOKEN=test-token run
rc=$?
check "a file without a published hash leaves the run unverified (3)" "[ $rc -eq 3 ]"
check "the published hash verifies the model" "grep -q 'verified model-turbo2bit.safetensors (published' '$work/out'"
check "the BF16 release's row verifies the Mimi file of the 2-bit set" \
    "grep -q 'verified tokenizer-e351c8d8-checkpoint125.safetensors (published' '$work/out'"
check "the table says what verified each file" \
    "grep -Eq '^model-turbo2bit.safetensors +300000  manifest' '$work/out' && grep -q '^tokenizer_spm_32k_3.model .*NOT VERIFIED' '$work/out'"
check "voices.tgz came from the pinned revision" "grep -q 'org/gated/resolve/$rev/voices.tgz' '$work/out'"
check "the model is in place" "cmp -s '$models/model-turbo2bit.safetensors' '$mirror/org/open/resolve/main/model-turbo2bit.safetensors'"
check "the unhashed file is kept aside" "[ -f '$models/tokenizer_spm_32k_3.model.unverified' ] && [ ! -f '$models/tokenizer_spm_32k_3.model' ]"
check "... with the advice to use --trust-on-first-use" "grep -q -- '--trust-on-first-use' '$work/out'"
check "voices.tgz verified and unpacked" "[ -f '$models/voices/NATF0.pt' ] && [ -f '$models/voices/NATM1.pt' ]"

HF_TOKEN=test-token run --trust-on-first-use
check "--trust-on-first-use accepts it (0)" "[ $? -eq 0 ] && [ -f '$models/tokenizer_spm_32k_3.model' ]"
check "and records its hash" "grep -q '^tokenizer_spm_32k_3.model [0-9a-f]\{64\} 5000 ' '$models/weights.local.sha256'"
check "without downloading it again" "! grep -q '== tokenizer_spm_32k_3.model' '$work/out'"

run --check --no-voices
check "--check verifies against the record" "[ $? -eq 0 ] && grep -q 'recorded on first use' '$work/out'"
check "... and its table tells manifest from local record" \
    "grep -Eq '^tokenizer_spm_32k_3.model +5000  local record' '$work/out' && grep -Eq '^model-turbo2bit.safetensors +300000  manifest' '$work/out'"
mv "$models/weights.local.sha256" "$work/local.sha256"
run --check --no-voices
check "--check writes no local record" "[ $? -eq 3 ] && [ ! -e '$models/weights.local.sha256' ]"
mv "$work/local.sha256" "$models/weights.local.sha256"
HF_ENDPOINT="file://$mirror" WEIGHTS_MANIFEST="$manifest" bash "$fetch" --check --dir "$work/typo" >"$work/out" 2>&1
check "--check of a missing DIR fails (1) and does not create it" \
    "[ $? -eq 1 ] && [ ! -e '$work/typo' ] && grep -q 'typo: no such directory' '$work/out'"
printf 'x' >>"$models/tokenizer_spm_32k_3.model"
run --check --no-voices
check "a changed file fails the check (1)" "[ $? -eq 1 ] && grep -q 'differs from the one recorded' '$work/out'"

# Resume: a partial download with the right first bytes completes and verifies; one with
# wrong first bytes (so a fresh download would have succeeded) is caught by the hash.
rm -f "$models/model-turbo2bit.safetensors"
head -c 120000 "$mirror/org/open/resolve/main/model-turbo2bit.safetensors" >"$models/model-turbo2bit.safetensors.part"
cp "$mirror/org/open/resolve/main/tokenizer_spm_32k_3.model" "$models/tokenizer_spm_32k_3.model"
run --no-voices
check "a partial download resumes and verifies" \
    "[ $? -eq 0 ] && cmp -s '$models/model-turbo2bit.safetensors' '$mirror/org/open/resolve/main/model-turbo2bit.safetensors'"
rm -f "$models/model-turbo2bit.safetensors"
head -c 120000 /dev/zero >"$models/model-turbo2bit.safetensors.part"
run --no-voices
check "a resumed file with wrong bytes is caught (1)" "[ $? -eq 1 ] && grep -q 'does not match the published' '$work/out'"
check "... and not put in place" "[ ! -f '$models/model-turbo2bit.safetensors' ] && [ -f '$models/model-turbo2bit.safetensors.unverified' ]"

run --format nf4 --no-voices
check "a wrong published hash fails (1)" "[ $? -eq 1 ] && [ ! -f '$models/model-nf4.safetensors' ]"

shared_models="$models" models="$work/gguf" # a fresh directory: the Mimi file there is not shared
run --format gguf-24l --no-voices --trust-on-first-use
check "a size that differs from the manifest fails (1) without hashing" \
    "[ $? -eq 1 ] && grep -q 'm.gguf.shard-01: 3000 bytes, weights.sha256 says 999 (not hashed)' '$work/out'"
check "shards come from the repository's folder, saved by their names" "[ -f '$models/m.gguf.shard-00' ]"
check "a same-named file that differs from the published one is refused" \
    "grep -q 'tokenizer-e351c8d8-checkpoint125.safetensors: 6000 bytes, weights.sha256 says 7000' '$work/out'"
models="$shared_models"

rm -f "$models"/*.unverified
HF_TOKEN=test-token run --format 2bit --web-client
check "--web-client unpacks the official client's tree" \
    "[ $? -eq 0 ] && [ -f '$models/web-client/index.html' ] && [ -f '$models/web-client/assets/app.js' ]"

echo "$passed passed, $failed failed"
if [ "$failed" -eq 0 ]; then rm -rf "$work"; else echo "kept $work"; cat "$work/out"; fi
[ "$failed" -eq 0 ]
