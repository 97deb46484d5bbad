#!/bin/sh
# personaplex-voice on a stereo clip whose speech is on channel 1 alone: the clone reads channel 0
# (as the reference does), so it fails, and the message must say that channel 0 is silent and the
# other is not. It used to say "the clip is silent", which the user can hear is false.
#   tool_voice_channel0.sh PERSONAPLEX_VOICE TEST_DATA
tool=$1 data=$2
d=$(mktemp -d) || exit 1
trap 'rm -rf "$d"' EXIT
# 3 s of 16-bit stereo at 24 kHz: left 0, right a 500 Hz square wave at -12 dBFS
: >"$d/period"
for _ in $(seq 24); do printf '\000\000\000\040' >>"$d/period"; done
for _ in $(seq 24); do printf '\000\000\000\340' >>"$d/period"; done
for _ in $(seq 10); do cat "$d/period"; done >"$d/ten"
{
    printf 'RIFF\044\145\004\000WAVEfmt \020\000\000\000\001\000\002\000\300\135\000\000\000\167\001\000\004\000\020\000'
    printf 'data\000\145\004\000'
    for _ in $(seq 150); do cat "$d/ten"; done
} >"$d/right.wav"
"$tool" "$d/right.wav" "$d/out.pt" --weights "$data/golden/lm-bf16/model.safetensors" \
    --mimi "$data/golden/mimi-speech/model.safetensors" --device cpu 2>"$d/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -q 'channel 0 is silent, another of its 2 channels is not' "$d/err"; then
    echo "exit $rc (want 1, naming channel 0):"
    cat "$d/err"
    exit 1
fi
test ! -e "$d/out.pt"
