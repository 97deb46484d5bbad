#!/bin/sh
# test_install: `cmake --install` to /usr/local staged under a temporary DESTDIR, as README's
# install does (and a packager would).
#   test_install.sh tree BUILD_DIR TEST_DEPLOY   the installed tree; the installed server started
#                                                from the installed configuration (/health, the
#                                                web UI from share/, the SIGTERM drain); a
#                                                re-install keeps an edited configuration
#   test_install.sh unit BUILD_DIR               `systemd-analyze verify` on the installed unit
#                                                (skipped, 77, without systemd-analyze)
# Ends with "N passed, N failed"; exit status 1 when a check failed.
set -u
mode="$1" build="$2" test_deploy="${3:-}"
root="$(mktemp -d /tmp/pp-install-XXXXXX)" # DESTDIR
prefix=/usr/local
tree="$root$prefix"
passed=0
failed=0
check() {
    if eval "$2"; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi
}
finish() {
    echo "$passed passed, $failed failed"
    if [ "$failed" -eq 0 ]; then rm -rf "$root"; else echo "kept $root"; fi
    [ "$failed" -eq 0 ]
    exit $?
}

if ! DESTDIR="$root" cmake --install "$build" --prefix "$prefix" >"$root/install.log" 2>&1; then
    cat "$root/install.log"
    echo "FAIL: cmake --install"
    exit 1
fi
unit="$tree/lib/systemd/system/personaplex.service"
conf="$root/etc/personaplex/personaplex.conf"

if [ "$mode" = unit ]; then
    if ! command -v systemd-analyze >/dev/null 2>&1; then
        echo "SKIPPED: systemd-analyze is missing (Debian package systemd)"
        rm -rf "$root"
        exit 77
    fi
    # verify also loads the units the file names (modprobe@.service ...) from the system.
    # MANPATH: verify also runs `man` for Documentation=, and the manual is in the prefix. It also
    # checks that ExecStart's program exists: a copy of the unit runs the staged one.
    sed "s|=$prefix/bin/|=$tree/bin/|" "$unit" >"$root/personaplex.service"
    out="$(MANPATH="$tree/share/man:" systemd-analyze verify "$root/personaplex.service" 2>&1)"
    rc=$?
    [ -n "$out" ] && echo "$out"
    check "systemd-analyze verify passes" "[ $rc -eq 0 ]"
    check "verify printed no complaint about the unit" "! echo \"\$out\" | grep -q personaplex.service"
    # README's drop-in handing the TLS key over as a credential (the ini block with LoadCredential=):
    # its keys and its %d specifier must be ones systemd takes
    readme="$(dirname "$0")/../README.md"
    mkdir -p "$root/personaplex.service.d"
    awk '/^```ini$/ { block = ""; inside = 1; next } inside && /^```$/ { inside = 0; if (block ~ /LoadCredential=/) printf "%s", block; next }
         inside { block = block $0 "\n" }' "$readme" | sed "s|=$prefix/bin/|=$tree/bin/|" >"$root/personaplex.service.d/tls.conf"
    check "README has the credentials drop-in" "grep -q '^LoadCredential=tls-key:' '$root/personaplex.service.d/tls.conf'"
    out="$(MANPATH="$tree/share/man:" systemd-analyze verify "$root/personaplex.service" 2>&1)"
    rc=$?
    [ -n "$out" ] && echo "$out"
    check "the unit with README's credentials drop-in verifies, with no complaint" \
        "[ $rc -eq 0 ] && ! echo \"\$out\" | grep -q 'personaplex.service'"
    check "Type=notify with a watchdog" "grep -q '^Type=notify' '$unit' && grep -q '^WatchdogSec=' '$unit'"
    check "a dedicated user" "grep -q '^DynamicUser=yes' '$unit'"
    check "hardening" "grep -q '^ProtectSystem=strict' '$unit' && grep -q '^NoNewPrivileges=yes' '$unit' && \
        grep -q '^DevicePolicy=closed' '$unit' && grep -q '^DeviceAllow=char-nvidia' '$unit'"
    finish
fi

for f in bin/personaplex-server bin/personaplex-inspect bin/personaplex-quantize bin/personaplex-fetch-weights; do
    check "$f installed and executable" "[ -x '$tree/$f' ]"
done
check "web UI in share/personaplex/web" "[ -f '$tree/share/personaplex/web/index.html' ]"
check "weights manifest in share/personaplex" "[ -f '$tree/share/personaplex/weights.sha256' ]"
check "the systemd unit" "[ -f '$unit' ]"
# /etc/personaplex whatever the prefix: README, --help and the unit's ConfigurationDirectory say so
check "the unit runs the installed server with /etc/personaplex/personaplex.conf" \
    "grep -qx 'ExecStart=$prefix/bin/personaplex-server --config /etc/personaplex/personaplex.conf' '$unit'"
check "the configuration in /etc/personaplex" "[ -f '$conf' ]"
check "the manual page" "[ -f '$tree/share/man/man1/personaplex-server.1' ]"
if command -v man >/dev/null 2>&1; then
    check "the manual renders without warnings and documents --config" \
        "[ -z \"\$(MANWIDTH=80 man --warnings -l '$tree/share/man/man1/personaplex-server.1' 2>&1 >/dev/null)\" ] && \
         MANWIDTH=80 man -l '$tree/share/man/man1/personaplex-server.1' 2>/dev/null | grep -q -- '--config FILE'"
fi
check "nginx and Kubernetes examples" \
    "[ -f '$tree/share/doc/personaplex/examples/nginx.conf' ] && [ -f '$tree/share/doc/personaplex/examples/k8s.yaml' ]"
check "fetch-weights finds its installed manifest" \
    "mkdir -p '$tree/models' && '$tree/bin/personaplex-fetch-weights' --check --dir '$tree/models' 2>&1 | grep -q 'missing from'"

# The installed server, started from the installed configuration (the command line moves the
# state directory and the port; the file's other settings stay).
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 28998)"
"$tree/bin/personaplex-server" --config "$conf" --demo --no-tls --port "$port" --state-dir "$tree/state" \
    >"$tree/server.log" 2>&1 &
pid=$!
ok=0
for _ in $(seq 1 600); do
    if curl -fs "http://127.0.0.1:$port/health" >"$tree/health.json" 2>/dev/null; then ok=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
check "the installed server answers /health with 200" "[ $ok -eq 1 ] && grep -q '\"status\":\"ok\"' '$tree/health.json'"
check "it serves the installed web UI" \
    "grep -q 'web UI: $tree/share/personaplex/web' '$tree/server.log' && \
     curl -fs 'http://127.0.0.1:$port/' | grep -qi '<html'"
kill -TERM "$pid" 2>/dev/null
wait "$pid"
check "it exits 0 on SIGTERM" "[ $? -eq 0 ]"
[ "$failed" -eq 0 ] || cat "$tree/server.log"

if [ -n "$test_deploy" ]; then
    check "the installed server drains on SIGTERM (test_deploy drain)" \
        "'$test_deploy' drain '$tree/bin/personaplex-server' --config '$conf' >'$tree/drain.log' 2>&1"
    [ "$failed" -eq 0 ] || cat "$tree/drain.log"
fi

# A re-install must not overwrite an operator's edits.
echo "# edited by the operator" >>"$conf"
DESTDIR="$root" cmake --install "$build" --prefix "$prefix" >"$root/install2.log" 2>&1
check "a re-install keeps the edited configuration" "grep -q 'edited by the operator' '$conf'"
check "and puts the new one beside it" "[ -f '$conf.example' ]"
finish
