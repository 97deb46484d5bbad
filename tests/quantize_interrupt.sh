#!/bin/sh
# personaplex-quantize stopped (SIGTERM; Ctrl-C and SIGHUP take the same path) while it stages a
# GGUF input as BF16: it exits by the signal and leaves no staging file and no ".tmp" beside the
# output.
#   quantize_interrupt.sh PERSONAPLEX_QUANTIZE GOLDEN_CASE_DIR (one with model.gguf)
quantize=$1
case=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cp "$case/model.gguf" "$case/config.json" "$d/"
"$quantize" "$d/model.gguf" "$d/out.safetensors" --format int8 >"$d/log" 2>&1 &
pid=$!
# wait for its first file beside the output (the staging file's .tmp), at most 10 s
i=0
while [ -z "$(ls "$d" | grep -v -e '^model.gguf$' -e '^config.json$' -e '^log$')" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "quantize ended before it could be stopped"
        exit 77
    fi
    i=$((i + 1))
    [ "$i" -gt 10000 ] && { echo "no staging file after 10 s"; kill "$pid"; exit 1; }
    sleep 0.001
done
echo "while running: $(ls "$d" | tr '\n' ' ')"
kill -TERM "$pid"
wait "$pid"
status=$?
left=$(ls "$d" | grep -v -e '^model.gguf$' -e '^config.json$' -e '^log$')
echo "exit status $status; left: ${left:-nothing}"
[ "$status" -eq 143 ] && [ -z "$left" ]
