#!/bin/sh
# The conversation defaults the server is started with must be ones the loaded model can start a
# conversation with. Each of these used to pass the start-up checks, the server said ready and
# /health ok, and every conversation relying on the default was then refused:
#   a default --voice whose file is truncated (its name is in --voices-dir),
#   a default --text-prompt @NAME when the model has no such named prompt,
#   a default --text-prompt longer than --max-prompt-tokens.
# Now the load fails (status 1) naming the option and the cause.
#   server_defaults_unusable.sh PERSONAPLEX_SERVER TEST_DATA
server=$1 data=$2
d=$(mktemp -d) || exit 1
trap 'rm -rf "$d"' EXIT
mkdir "$d/voices"
head -c 1000 "$data/golden/lm-bf16/voice.pt" >"$d/voices/NATF2.pt"

# expect WHAT MESSAGE ARGS...: the server exits 1 with "cannot load the model: MESSAGE"
expect() {
    what=$1 message=$2
    shift 2
    timeout 60 "$server" --demo --port 0 --no-tls --state-dir "$d/state" "$@" >"$d/log" 2>&1
    rc=$?
    if [ $rc -ne 1 ] || ! grep -qF "cannot load the model: $message" "$d/log"; then
        echo "$what: exit $rc (want 1 and '$message'):"
        tail -3 "$d/log"
        exit 1
    fi
}
expect "truncated default voice" "--voice NATF2: $d/voices/NATF2.pt: " --voices-dir "$d/voices" --voice NATF2
expect "unknown named prompt" "--text-prompt: no system prompt named 'helpful'" --text-prompt @helpful
expect "persona over the token limit" "--text-prompt: the text prompt is too long: the limit is 5 tokens" \
    --max-prompt-tokens 5
