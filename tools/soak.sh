#!/usr/bin/env bash
# Soak test: personaplex-server --demo on loopback with clients connecting, talking and
# disconnecting for a while, watching for leaks and drift.
#
#   tools/soak.sh BUILD_DIR [SECONDS]        (default 600; CI runs a short version)
#
# Two personaplex-loadtest loops run side by side against one server (2 clients each; rounds of
# 20 s and 13 s, so conversations start and end at different times, up to 4 at once). Every 5 s
# the server's VmRSS, open fds and /metrics counters are sampled (SOAK_LOG, default
# BUILD_DIR/soak.tsv). It fails when
#   - a loadtest round fails (no handshake, a broken or incomplete reply stream),
#   - the idle server's fds at the end differ from the idle server's at the start,
#   - RSS at the end exceeds the highest RSS of the warm-up (the first third) by more than
#     SOAK_RSS_SLACK_MB (default 16): a leak per conversation grows it steadily (not judged in
#     an AddressSanitizer build, whose quarantine grows RSS; its leak check at exit judges),
#   - the late-frame share of the last third exceeds the first third's by more than 5 points,
#   - the server does not exit 0 on SIGTERM (under the sanitizers: a report or a leak).
# The last line is "soak: N passed, N failed" after a summary of the figures.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/script-help.sh" # -h/--help: the comment above, exit 0

build="$(cd "${1:?usage: soak.sh BUILD_DIR [SECONDS]}" && pwd)"
seconds="${2:-600}"
slack_mb="${SOAK_RSS_SLACK_MB:-16}"
log="${SOAK_LOG:-$build/soak.tsv}"
server="$build/personaplex-server"
loadtest="$build/personaplex-loadtest"
for bin in "$server" "$loadtest"; do
    [ -x "$bin" ] || { echo "soak: $bin is not built" >&2; exit 77; }
done

dir="$(mktemp -d /tmp/pp-soak-XXXXXX)"
"$server" --demo --no-tls --host 127.0.0.1 --port 0 --state-dir "$dir" --max-sessions 6 --log-file "$dir/server.log" &
pid=$!
cleanup() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
trap cleanup EXIT

port=""
for _ in $(seq 600); do
    port="$(sed -nE 's|.*listening on http://[^:]+:([0-9]+)/.*|\1|p' "$dir/server.log" 2>/dev/null | head -n 1)"
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" 2>/dev/null | grep -q '"ready":true' && break
    kill -0 "$pid" 2>/dev/null || { echo "soak: the server exited (log: $dir/server.log)" >&2; exit 1; }
    sleep 0.1
done
[ -n "$port" ] || { echo "soak: the server never became ready" >&2; exit 1; }

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"; }
fds() { ls "/proc/$pid/fd" | wc -l; }
metric() { curl -sf "http://127.0.0.1:$port/metrics" | awk -v n="$1" '$1 == n {print $2; exit}'; }

fds_start="$(fds)"
rss_start="$(rss_kb)"
end=$((SECONDS + seconds))
# One loop of loadtest rounds; failed rounds are counted in a file.
client_loop() {
    local round="$1"
    while [ $((SECONDS + round)) -le "$end" ]; do
        "$loadtest" --port "$port" --clients 2 --seconds "$round" >>"$dir/loadtest-$round.log" 2>&1 ||
            echo "round of $round s failed" >>"$dir/failures"
    done
}
client_loop 20 &
loop_a=$!
sleep 3
client_loop 13 &
loop_b=$!

printf "t_s\trss_kb\tfds\tsessions\tframes\tlate\n" >"$log"
start=$SECONDS
while kill -0 "$loop_a" 2>/dev/null || kill -0 "$loop_b" 2>/dev/null; do
    printf "%d\t%s\t%s\t%s\t%s\t%s\n" $((SECONDS - start)) "$(rss_kb)" "$(fds)" "$(metric personaplex_sessions_total)" \
        "$(metric personaplex_frames_total)" "$(metric personaplex_late_frames_total)" >>"$log"
    sleep 5
done
wait "$loop_a" "$loop_b"
for _ in $(seq 100); do [ "$(metric personaplex_sessions_active)" = 0 ] && break; sleep 0.1; done
sleep 1
fds_end="$(fds)"
rss_end="$(rss_kb)"
sessions="$(metric personaplex_sessions_total)"

passed=0
failed=0
check() { if eval "$2"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "soak: FAILED: $1" >&2; fi; }

# Thirds of the sampled run: warm-up RSS peak; late-frame shares of the first and last third.
read -r rss_warm late_first late_last < <(awk -F'\t' 'NR > 1 { t[NR] = $1; r[NR] = $2; f[NR] = $5; l[NR] = $6; n = NR }
    END {
        third = t[n] / 3; peak = 0
        for (i = 2; i <= n; i++) {
            if (t[i] <= third && r[i] > peak) peak = r[i]
            if (t[i] <= third) { a = i } else if (!b && t[i] >= 2 * third) { b = i }
        }
        fa = f[a] - f[2]; la = l[a] - l[2]; fb = f[n] - f[b]; lb = l[n] - l[b]
        printf "%d %.2f %.2f\n", peak, (fa > 0 ? 100 * la / fa : 0), (fb > 0 ? 100 * lb / fb : 0)
    }' "$log")
failures="$(cat "$dir/failures" 2>/dev/null | wc -l)"
rounds="$(cat "$dir"/loadtest-*.log | grep -c "clients" || true)"
check "loadtest rounds all passed ($failures failed)" '[ "$failures" -eq 0 ]'
check "idle fds at the end ($fds_end) = at the start ($fds_start)" '[ "$fds_end" -eq "$fds_start" ]'
# Under AddressSanitizer freed memory waits in its quarantine, so RSS grows without a leak;
# LeakSanitizer judges leaks at the server's exit there instead. gcc links the runtime as
# libasan.so, clang into the program, so the test is for its entry point's name in the file.
if grep -qa __asan_init "$server"; then
    echo "soak: RSS not judged (AddressSanitizer build; its leak check runs at exit)"
else
    check "RSS at the end ($rss_end kB) within $slack_mb MB of the warm-up peak ($rss_warm kB)" \
        '[ "$rss_end" -le $((rss_warm + slack_mb * 1024)) ]'
fi
check "late frames last third ($late_last%) <= first third ($late_first%) + 5" \
    "awk 'BEGIN { exit !($late_last <= $late_first + 5) }'"
trap - EXIT
kill "$pid"
wait "$pid"
status=$?
check "server exits 0 on SIGTERM (got $status)" '[ "$status" -eq 0 ]'

echo "soak: $((seconds / 60)) min $((seconds % 60)) s, $sessions conversations, RSS start $rss_start kB," \
    "warm-up peak $rss_warm kB, end $rss_end kB; fds start $fds_start, end $fds_end;" \
    "late frames $late_first% (first third), $late_last% (last third); samples in $log"
if [ "$failed" -eq 0 ]; then rm -rf "$dir"; else echo "soak: server log kept in $dir" >&2; fi
echo "soak: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
