#!/bin/sh
# The server's default --voice must be a voice the model can start with, not only a name in
# --voices-dir: a truncated file (or one of another model's width) used to pass the start-up
# check, /health said ok, and every conversation without a voice_prompt then failed. Now the
# load fails (status 1) naming the option and the file.
#   server_default_voice_unreadable.sh PERSONAPLEX_SERVER TEST_DATA
server=$1 data=$2
d=$(mktemp -d) || exit 1
trap 'rm -rf "$d"' EXIT
mkdir "$d/voices"
head -c 1000 "$data/golden/lm-bf16/voice.pt" >"$d/voices/NATF2.pt"
timeout 60 "$server" --demo --port 0 --no-tls --state-dir "$d/state" --voices-dir "$d/voices" --voice NATF2 \
    >"$d/log" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "cannot load the model: --voice NATF2: $d/voices/NATF2.pt: " "$d/log"; then
    echo "exit $rc (want 1, naming --voice and the file):"
    tail -5 "$d/log"
    exit 1
fi
