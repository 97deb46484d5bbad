#!/bin/sh
# personaplex-convert stopped (SIGTERM; Ctrl-C and SIGHUP take the same path) while it writes
# OUT_DIR: it exits by the signal and leaves no ".tmp" there (it left model.safetensors.tmp).
# Up to 10 tries at catching a run mid-file; 77 (skipped) when every one ends first.
#   convert_interrupt.sh PERSONAPLEX_CONVERT BUNDLE_DIR
convert=$1
bundle=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
try=0
while [ "$try" -lt 10 ]; do
    try=$((try + 1))
    rm -rf "$d/out"
    "$convert" "$bundle" "$d/out" >"$d/log" 2>&1 &
    pid=$!
    caught=0
    while kill -0 "$pid" 2>/dev/null; do
        if [ -n "$(find "$d/out" -name '*.tmp' 2>/dev/null)" ]; then
            caught=1
            break
        fi
    done
    if [ "$caught" -eq 0 ]; then
        wait "$pid"
        continue
    fi
    echo "while running: $(find "$d/out" -type f | sed "s|$d/out/||" | tr '\n' ' ')"
    kill -TERM "$pid"
    wait "$pid"
    status=$?
    [ "$status" -eq 0 ] && continue # it ended between the look and the signal
    left=$(find "$d/out" -name '*.tmp' | sed "s|$d/out/||")
    echo "exit status $status; .tmp left: ${left:-none}"
    [ "$status" -eq 143 ] && [ -z "$left" ]
    exit $?
done
echo "convert ended before it could be stopped, $try times"
exit 77
