#!/bin/sh
# personaplex-quantize and personaplex-convert past a file-size limit (ulimit -f, the portable
# stand-in for a full disk): each write that crosses it fails with EFBIG, so the tool exits 1
# naming the file and the reason and leaves no ".tmp" or staging file; killed by SIGXFSZ, it
# left them. The limit lands early in each output, then at each 512-byte step of the last 4 KiB
# of one.
#   write_file_limit.sh PERSONAPLEX_QUANTIZE PERSONAPLEX_CONVERT GOLDEN_DIR
quantize=$1
convert=$2
golden=$3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail=0
mkdir "$d/bf16" "$d/q4k" "$d/bundle"
cp "$golden/lm-bf16/model.safetensors" "$golden/lm-bf16/config.json" "$d/bf16/"
cp "$golden/lm-q4k/model.gguf" "$golden/lm-q4k/config.json" "$d/q4k/"
# run NAME DIR KEEP COMMAND...: under a limit of 1000 blocks (0.5-1 MB, below every output here)
run() {
    name=$1 dir=$2 keep=$3
    shift 3
    (ulimit -f 1000 && exec "$@") >"$d/log" 2>&1
    status=$?
    left=$(ls "$dir" 2>/dev/null | grep -v -x -e "$keep" -e config.json)
    echo "$name: exit $status; $(grep -i 'too large' "$d/log" | head -1); left: ${left:-nothing}"
    if [ "$status" -ne 1 ] || ! grep -q 'File too large' "$d/log" || [ -n "$left" ]; then fail=1; fi
}
run "quantize dense" "$d/bf16" model.safetensors "$quantize" "$d/bf16/model.safetensors" "$d/bf16/out.safetensors" --format int4
run "quantize staged" "$d/q4k" model.gguf "$quantize" "$d/q4k/model.gguf" "$d/q4k/out.safetensors" --format int4
run "convert" "$d/bundle/out" '' "$convert" "$golden/lm-onnx-int8/bundle" "$d/bundle/out"
# A limit inside the output's last 4 KiB: those bytes sit in the stdio buffer until the final
# flush, whose failure must carry its reason too (it said only "write failed").
"$quantize" "$d/bf16/model.safetensors" "$d/bf16/whole.safetensors" --format int4 >/dev/null 2>&1
size=$(wc -c <"$d/bf16/whole.safetensors")
rm -f "$d/bf16/whole.safetensors"
k=0
while [ "$k" -le 8 ]; do
    limit=$((size / 512 - k))
    (ulimit -f "$limit" && exec "$quantize" "$d/bf16/model.safetensors" "$d/bf16/out.safetensors" --format int4) \
        >"$d/log" 2>&1
    status=$?
    left=$(ls "$d/bf16" | grep -v -x -e model.safetensors -e config.json)
    if [ "$status" -ne 1 ] || ! grep -q 'File too large' "$d/log" || [ -n "$left" ]; then
        echo "limit $limit of $size bytes: exit $status; $(tail -1 "$d/log"); left: ${left:-nothing}"
        fail=1
    fi
    k=$((k + 1))
done
exit $fail
