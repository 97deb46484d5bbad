#!/bin/sh
# --host :: serves IPv4 clients as well as IPv6 ones even where the system makes IPv6 sockets
# IPv6-only (net.ipv6.bindv6only=1, as some distributions and hardened hosts set it). Runs in a
# network namespace of its own (unshare -rn: no root needed), where that setting is private and
# every port is free; skips (77) where user namespaces, ip or curl are not available.
#   host_dual_stack.sh PERSONAPLEX_SERVER
server=$1
port=47001
command -v unshare >/dev/null && command -v ip >/dev/null && command -v curl >/dev/null || exit 77
unshare -rn true 2>/dev/null || { echo "no user and network namespaces here"; exit 77; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
unshare -rn sh -c '
server=$1 port=$2 d=$3
ip link set lo up && echo 1 >/proc/sys/net/ipv6/bindv6only || exit 77
"$server" --demo --no-tls --host :: --port "$port" --state-dir "$d/state" >"$d/log" 2>&1 &
pid=$!
i=0
until curl -s -m 2 "http://[::1]:$port/health" | grep -q "\"ready\":true"; do
    i=$((i + 1))
    if [ $i -gt 60 ] || ! kill -0 $pid 2>/dev/null; then
        echo "the server did not get ready over IPv6"
        tail -20 "$d/log"
        kill $pid 2>/dev/null
        exit 1
    fi
    sleep 0.5
done
curl -s -m 2 "http://127.0.0.1:$port/health" | grep -q "\"ready\":true"
v4=$?
kill $pid
wait $pid
stopped=$?
[ $v4 -eq 0 ] || echo "--host :: with bindv6only=1: 127.0.0.1 is not served"
[ $stopped -eq 0 ] || echo "the server exited with status $stopped on SIGTERM"
[ $v4 -eq 0 ] && [ $stopped -eq 0 ]
' sh "$server" "$port" "$d"
