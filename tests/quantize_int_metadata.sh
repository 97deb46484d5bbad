#!/bin/sh
# personaplex-quantize on a dense checkpoint that also holds integer metadata (an I64 step
# counter): quantized directly, the counter copied as stored. It was taken for a quantized layout
# and staged as BF16 through the LM catalogue first, which failed here (no LM) and, on an LM,
# dropped the counter after minutes of staging.
#   quantize_int_metadata.sh PERSONAPLEX_QUANTIZE PERSONAPLEX_INSPECT
quantize=$1
inspect=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
header='{"w.weight":{"dtype":"F32","shape":[2,64],"data_offsets":[0,512]},"step":{"dtype":"I64","shape":[1],"data_offsets":[512,520]}}'
while [ $((${#header} % 8)) -ne 0 ]; do header="$header "; done
n=${#header}
# the header length as a u64, little-endian (under 65536 here)
printf "$(printf '\\%03o\\%03o\\000\\000\\000\\000\\000\\000' $((n % 256)) $((n / 256)))" >"$d/in.safetensors"
printf '%s' "$header" >>"$d/in.safetensors"
head -c 520 /dev/zero >>"$d/in.safetensors"
"$quantize" "$d/in.safetensors" "$d/out.safetensors" --format int8 --group 64 >"$d/log" 2>&1
status=$?
cat "$d/log"
"$inspect" "$d/out.safetensors" >"$d/tensors" 2>&1
cat "$d/tensors"
[ "$status" -eq 0 ] && ! grep -q decoding "$d/log" && grep -q 'step .*I64' "$d/tensors" &&
    grep -q 'w.weight .*I8' "$d/tensors"
