#!/bin/sh
# personaplex-voice refuses, with status 2 and before any work, an output file whose name the
# server would neither list nor select as a voice: it used to clone and write it.
#   tool_voice_bad_name.sh PERSONAPLEX_VOICE TEST_DATA
tool=$1 data=$2
d=$(mktemp -d) || exit 1
trap 'rm -rf "$d"' EXIT
for name in 'my voice' "$(printf '\303\211lodie')" 'x.bin' '.hidden'; do
    "$tool" "$data/golden/speech-24k.wav" "$d/$name.pt" --weights "$data/golden/lm-bf16/model.safetensors" \
        --mimi "$data/golden/mimi-speech/model.safetensors" --device cpu 2>"$d/err"
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q 'no voice name the server takes' "$d/err"; then
        echo "'$name.pt': exit $rc (want 2 and the naming rules)"
        cat "$d/err"
        exit 1
    fi
    if [ -e "$d/$name.pt" ]; then
        echo "'$name.pt' was written"
        exit 1
    fi
done
# a name the server takes is still written
"$tool" "$data/golden/speech-24k.wav" "$d/My_voice-2.pt" --weights "$data/golden/lm-bf16/model.safetensors" \
    --mimi "$data/golden/mimi-speech/model.safetensors" --device cpu >/dev/null 2>&1 && test -s "$d/My_voice-2.pt"
