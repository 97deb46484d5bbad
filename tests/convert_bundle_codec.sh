#!/bin/sh
# personaplex-convert on a whole ONNX bundle: the LM graphs of golden/lm-onnx-int8 with the codec
# graphs of golden/mimi-onnx, and one config.json holding both configurations. The codec it
# writes must pass mimi-onnx's golden case, the LM lm-onnx-int8's.
#   convert_bundle_codec.sh PERSONAPLEX_CONVERT PERSONAPLEX_GOLDEN GOLDEN_DIR
set -eu
convert="$1" golden="$2" cases="$3"
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT
lm="$cases/lm-onnx-int8" codec="$cases/mimi-onnx"
cp -r "$lm/bundle" "$d/b"
cp "$codec"/bundle/* "$d/b/"
# both JSON objects as one: the LM's without its closing brace, the codec's without its opening one
{ sed '$ s/}[[:space:]]*$//' "$lm/bundle/config.json"; printf ','; sed '1 s/^[[:space:]]*{//' "$codec/config.json"; } \
    >"$d/b/config.json"
"$convert" "$d/b" "$d/out"
mkdir "$d/mimi-converted" "$d/lm-converted"
mv "$d/out/tokenizer-e351c8d8-checkpoint125.safetensors" "$d/mimi-converted/model.safetensors"
cp "$codec/config.json" "$codec/golden.safetensors" "$d/mimi-converted/"
"$golden" "$d/mimi-converted"
mv "$d/out/model.safetensors" "$d/out/voices" "$d/lm-converted/"
mv "$d/out/config.json" "$d/lm-converted/"  # the merged one: the LM ignores the codec keys
cp "$lm/golden.safetensors" "$d/lm-converted/"
"$golden" "$d/lm-converted" --voice "$d/lm-converted/voices/NATF2.pt"
