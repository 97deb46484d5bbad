#!/bin/sh
# personaplex-quantize stopped (SIGTERM; Ctrl-C and SIGHUP take the same path) while it stages a
# GGUF input as BF16: it exits by the signal and leaves no staging file and no ".tmp" beside the
# output. Then with OUT a symbolic link into another folder (a models folder of links into a data
# volume), stopped while it writes the output: the ".tmp" beside the link's target goes too.
#   quantize_interrupt.sh PERSONAPLEX_QUANTIZE GOLDEN_CASE_DIR (one with model.gguf)
quantize=$1
case=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cp "$case/model.gguf" "$case/config.json" "$d/"

# stop_when DIR PATTERN: waits (at most 10 s) until a file matching PATTERN is in DIR, then sends
# SIGTERM to $pid and waits for it; exit 77 when the run ends first
stop_when() {
    i=0
    while ! ls "$1" | grep -q -e "$2"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "quantize ended before it could be stopped"
            exit 77
        fi
        i=$((i + 1))
        [ "$i" -gt 10000 ] && { echo "no $2 in $1 after 10 s"; kill "$pid"; exit 1; }
        sleep 0.001
    done
    echo "while running: $(ls "$1" | tr '\n' ' ')"
    kill -TERM "$pid"
    wait "$pid"
    status=$?
}

"$quantize" "$d/model.gguf" "$d/out.safetensors" --format int8 >"$d/log" 2>&1 &
pid=$!
stop_when "$d" 'staging'
left=$(ls "$d" | grep -v -e '^model.gguf$' -e '^config.json$' -e '^log$')
echo "exit status $status; left: ${left:-nothing}"
[ "$status" -eq 143 ] && [ -z "$left" ] || exit 1

mkdir "$d/data" "$d/models"
echo "an older model" >"$d/data/model.safetensors"
ln -s ../data/model.safetensors "$d/models/model.safetensors"
"$quantize" "$d/model.gguf" "$d/models/model.safetensors" --format int8 >"$d/log" 2>&1 &
pid=$!
stop_when "$d/data" '\.tmp$'
left=$(ls "$d/data" "$d/models" | grep -v -e '^model.safetensors$' -e '^$' -e ':$')
echo "OUT a link: exit status $status; left: ${left:-nothing}"
[ "$status" -eq 143 ] && [ -z "$left" ] && [ "$(cat "$d/data/model.safetensors")" = "an older model" ]
