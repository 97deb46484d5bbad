/* test_deploy: personaplex-server the way an operator runs it: stopped by SIGTERM, and several
 * instances behind nginx.
 *
 * usage: test_deploy drain SERVER [ARG...]
 *        test_deploy proxy SERVER SOURCE_DIR
 *        test_deploy host|models|voices|cert|signal|echo SERVER
 *
 * drain: starts `SERVER ARG... --demo --no-tls --host 127.0.0.1 --port P --state-dir D` (the
 *   install test passes the installed binary and --config FILE as ARGs). Two conversations
 *   are open, one from a client that stopped reading. After SIGTERM the other client gets,
 *   after its handshake, 0x05 "server shutting down" and close 1001; both sessions are
 *   drained and the server exits with status 0. The server runs with NOTIFY_SOCKET and
 *   WATCHDOG_USEC pointing at a socket of the test, standing in for systemd: it must report
 *   READY=1, ping WATCHDOG=1 and announce STOPPING=1 (when built with libsystemd). (The drain closes conversations at
 * once, so the window in which /health says "draining" and new conversations are refused is too short to hit from a
 * test.) drain-unread: the same with a notification socket nobody reads (a stuck service manager), SIGTERM 3 s after
 * the handshake: the drain happens all the same, and the server says once that notifications were not sent. proxy:
 * instances A (--max-sessions 1) and B (--max-sessions 2), both --demo --no-tls
 *   --behind-proxy, behind Debian's nginx run as an ordinary process (its own prefix, config
 *   and temp paths, an ephemeral loopback port) with the upstream groups, proxy directives and
 *   locations of tools/deploy/nginx.conf. A conversation through nginx gets the 0x00 handshake, and an upgrade
 *   of each WebSocket path (/api/chat, /v1/realtime, /v1/twilio) gets 101. With A
 *   held full by a direct client, three conversations through nginx: two get handshakes (both
 *   on B: A refused its upgrade with 503 and nginx retried on B, as A's counter shows) and the
 *   third, with every instance full, gets none. With B held full too, an upgrade is refused
 *   while the page and /health (503, "full") still come from an instance. The shipped
 *   nginx.conf passes `nginx -t`.
 * Skips (77) when nginx is not installed. host, models, voices, cert: the
 * start-up checks of --host (and HEAD requests, on its server), the --models-dir lookup, the
 * voices and the certificate's expiry;
 * signal: stop signals while the model loads (run_signal). echo: the capacity plan counts echo
 * cancellation under the default --echo-cancel auto (run_echo). */
#define _DEFAULT_SOURCE
#include "server_harness.h"
#include "test.h"
#include "ws_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ARGS 32

static char g_dir[256];

/* ---- processes and plain sockets -------------------------------------------------------------- */

/* Runs argv with stdout and stderr in log. */
static pid_t spawn(const char *const *argv, const char *log) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* method (GET, HEAD) path over a plain socket (usable from any process, unlike the lws client).
 * Returns the status (or -1) and the body in body. */
static int raw_request(int port, const char *method, const char *path, char *body, size_t cap) {
    int fd = sp_connect(port, 0);
    if (fd < 0) return -1;
    char req[256], buf[4096];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: localhost\r\n\r\n", method, path);
    size_t got = 0;
    ssize_t r = write(fd, req, (size_t)n);
    while (r > 0 && got + 1 < sizeof buf && (r = read(fd, buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
    close(fd);
    buf[got] = '\0';
    int status = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) return -1;
    const char *b = strstr(buf, "\r\n\r\n");
    snprintf(body, cap, "%s", b ? b + 4 : "");
    return status;
}

static int raw_get(int port, const char *path, char *body, size_t cap) { return raw_request(port, "GET", path, body, cap); }

static int wait_health(int port, const char *needle, pid_t pid) {
    char body[2048];
    for (int i = 0; i < 600; i++) {
        raw_get(port, "/health", body, sizeof body);
        if (strstr(body, needle)) return 1;
        if (pid > 0 && waitpid(pid, NULL, WNOHANG) == pid) return 0;
        usleep(100000);
    }
    return 0;
}

/* Sends a WebSocket upgrade of path on fd and reads the answer's first bytes: its HTTP status, or -1. */
static int upgrade(int fd, const char *path) {
    char req[512], buf[256];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                     path);
    ssize_t got;
    int status = -1;
    if (fd < 0 || write(fd, req, (size_t)n) != n || (got = read(fd, buf, sizeof buf - 1)) <= 0) return -1;
    buf[got] = '\0';
    return sscanf(buf, "HTTP/1.1 %d", &status) == 1 ? status : -1;
}

/* A child that opens a chat WebSocket on port, reads the 101, then never reads again (so it
 * also never answers a close) until it is killed. */
static pid_t silent_client(int port) {
    pid_t pid = fork();
    if (pid) return pid;
    if (upgrade(sp_connect(port, 0), "/api/chat") != 101) _exit(1);
    for (;;) pause();
}

static long metric(int port, const char *name) {
    char body[16384];
    if (raw_get(port, "/metrics", body, sizeof body) != 200) return -1;
    for (const char *p = body; (p = strstr(p, name)); p++)
        if (p == body || p[-1] == '\n') return atol(p + strlen(name));
    return -1;
}

/* A datagram socket standing in for systemd's notification socket; its path goes to the
 * server through NOTIFY_SOCKET. */
/* The test's stand-in for systemd's notification socket, read as the messages come (as systemd
 * reads it: a socket nobody reads holds 10 datagrams, the watchdog's pings fill it in 2 s). */
static struct {
    int fd;
    atomic_int stop;
    pthread_t reader;
    char text[65536]; /* the datagrams, joined by newlines */
    size_t len;
} g_notes;

static void notes_take(void) {
    ssize_t n;
    while (g_notes.len + 2 < sizeof g_notes.text &&
           (n = recv(g_notes.fd, g_notes.text + g_notes.len, sizeof g_notes.text - g_notes.len - 2, 0)) > 0) {
        g_notes.len += (size_t)n;
        g_notes.text[g_notes.len++] = '\n';
        g_notes.text[g_notes.len] = '\0';
    }
}

static void *notes_main(void *arg) {
    (void)arg;
    while (!atomic_load(&g_notes.stop)) {
        struct pollfd p = {g_notes.fd, POLLIN, 0};
        if (poll(&p, 1, 50) > 0) notes_take();
    }
    return NULL;
}

/* unread: the reader never starts (a service manager that does not read its socket). */
static int notify_socket(int unread) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(a.sun_path, sizeof a.sun_path, "%s/notify.sock", g_dir) >= sizeof a.sun_path) return -1;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0) return -1;
    setenv("NOTIFY_SOCKET", a.sun_path, 1);
    setenv("WATCHDOG_USEC", "400000", 1); /* pings every 0.2 s */
    g_notes.fd = fd;
    if (unread) atomic_store(&g_notes.stop, 1);
    return pthread_create(&g_notes.reader, NULL, notes_main, NULL) == 0 ? fd : -1;
}

/* Everything the server sent to the notification socket. */
static const char *notify_read(void) {
    atomic_store(&g_notes.stop, 1);
    pthread_join(g_notes.reader, NULL);
    notes_take();
    close(g_notes.fd);
    return g_notes.text;
}

/* ---- drain --------------------------------------------------------------------------------------- */

/* unread_notes: the notification socket is never read, and SIGTERM comes 3 s after the
 * handshake, when its queue has long been full: the drain must not wait on it. */
static void run_drain(const char *server, int unread_notes, int n_extra, char **extra) {
    int port = sp_free_port();
    char port_s[16], log[300];
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(log, sizeof log, "%s/server.log", g_dir);
    const char *argv[MAX_ARGS + 16] = {server};
    int n = 1;
    for (int i = 0; i < n_extra && i < MAX_ARGS; i++) argv[n++] = extra[i];
    const char *tail[] = {"--demo", "--no-tls", "--host", "127.0.0.1", "--port", port_s, "--state-dir", g_dir, NULL};
    memcpy(argv + n, tail, sizeof tail);
    TEST_COND("notification socket", notify_socket(unread_notes) >= 0);
    pid_t pid = spawn(argv, log);
    TEST_COND("server ready", wait_health(port, "\"status\":\"ok\"", pid));

    pid_t silent = silent_client(port);
    TEST_COND("the silent client holds a session", wait_health(port, "\"active\":1", pid));
    TEST_COND("no bad input yet", metric(port, "personaplex_bad_input_total ") == 0);
    TEST_COND("/metrics: the capacity was timed at the model's full context",
              metric(port, "personaplex_capacity_context_frames ") > 0 &&
                  metric(port, "personaplex_capacity_by_time ") >= 1);
    /* The talking client sends one message of an unknown kind after its handshake; the
     * server counts it as bad input, which tells a helper process that the handshake is
     * done: it then sends SIGTERM. */
    pid_t killer = fork();
    if (killer == 0) {
        int ok = 0;
        for (int i = 0; i < 600 && !(ok = metric(port, "personaplex_bad_input_total ") >= 1); i++) usleep(50000);
        if (ok && unread_notes) sleep(3);
        if (ok) kill(pid, SIGTERM);
        _exit(ok ? 0 : 1);
    }
    wc_init(0, port);
    static uint8_t unknown_kind[] = {0x07};
    wc_msg marker = {unknown_kind, 1, 0};
    wc_conn c = {0};
    c.path = "/api/chat";
    c.wait_handshake = 1;
    c.extra = &marker;
    c.n_extra = 1;
    c.linger_ms = 30000; /* the server's close ends it */
    wc_conn *l[] = {&c};
    wc_run(l, 1, NULL, 0, 40000);
    int killer_status = -1;
    waitpid(killer, &killer_status, 0);
    TEST_COND("SIGTERM sent with two sessions open", WIFEXITED(killer_status) && WEXITSTATUS(killer_status) == 0);
    TEST_COND("the client had its handshake", c.handshakes == 1);
    TEST_COND("then 0x05 server shutting down", c.errors >= 1 && strstr(c.last_error, "server shutting down"));
    TEST_COND("then close 1001", c.close_code == 1001);
    printf("drained client: %d errors, last \"%s\", close %d\n", c.errors, c.last_error, c.close_code);
    wc_conn_free(&c);

    wc_shutdown();

    kill(silent, SIGKILL);
    waitpid(silent, NULL, 0);
    int st = 0, exited = 0;
    for (int i = 0; i < 300 && !(exited = waitpid(pid, &st, WNOHANG) == pid); i++) usleep(100000);
    int rc = exited ? (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)) : sp_stop(pid);
    TEST_COND("the server exits 0 after the drain", rc == 0);
    TEST_COND("the log tells the drain", test_lines_with(log, "draining 2 conversations") > 0);
    const char *notes = notify_read();
#ifdef PP_HAVE_SYSTEMD
    if (unread_notes) {
        TEST_COND("an unread notification socket is logged once",
                  test_lines_with(log, "not sent to the service manager") == 1);
        return;
    }
    TEST_COND("systemd: READY=1 with the status line", strstr(notes, "READY=1\nSTATUS=ready: model demo"));
    TEST_COND("systemd: watchdog pings", strstr(notes, "WATCHDOG=1"));
    TEST_COND("systemd: STOPPING=1 when draining", strstr(notes, "STOPPING=1\nSTATUS=draining 2 conversations"));
#else
    (void)notes;
#endif
}

/* ---- proxy --------------------------------------------------------------------------------------- */

static const char *find_nginx(void) {
    static const char *const paths[] = {"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (access(paths[i], X_OK) == 0) return paths[i];
    return NULL;
}

static pid_t start_instance(const char *server, const char *name, int port, const char *max) {
    char dir[300], log[320], port_s[16];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, name);
    mkdir(dir, 0755);
    snprintf(log, sizeof log, "%s/server.log", dir);
    snprintf(port_s, sizeof port_s, "%d", port);
    const char *argv[] = {server, "--demo", "--no-tls", "--behind-proxy", "--host", "127.0.0.1", "--port", port_s,
                          "--max-sessions", max, "--state-dir", dir, NULL};
    return spawn(argv, log);
}

/* Writes line to f with the shipped instance addresses 127.0.0.1:8998 and :8999 made a and b. */
static void put_instance_line(FILE *f, const char *line, int a, int b) {
    const char *at = strstr(line, "127.0.0.1:899");
    if (!at || (at[13] != '8' && at[13] != '9')) {
        fputs(line, f);
        return;
    }
    fprintf(f, "%.*s127.0.0.1:%d%s", (int)(at - line), line, at[13] == '8' ? a : b, at + 14);
}

/* The shipped tools/deploy/nginx.conf's upstream groups and map, and its proxying (its HTTPS
 * server block's directives and locations), as they are, on a private prefix, in front of
 * instances a and b, without TLS. */
static int write_nginx_conf(const char *path, const char *source, int listen, int a, int b) {
    char shipped[600], line[512];
    snprintf(shipped, sizeof shipped, "%s/tools/deploy/nginx.conf", source);
    FILE *f = fopen(path, "w"), *in = fopen(shipped, "r");
    if (!f || !in) return -1;
    fprintf(f,
            "daemon off;\nmaster_process off;\npid %s/nginx.pid;\nerror_log %s/nginx-error.log info;\n"
            "events { worker_connections 64; }\n"
            "http {\n  access_log %s/nginx-access.log;\n"
            "  client_body_temp_path %s/t1; proxy_temp_path %s/t2; fastcgi_temp_path %s/t3;\n"
            "  uwsgi_temp_path %s/t4; scgi_temp_path %s/t5;\n",
            g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir);
    /* the upstream and map blocks whole; the HTTPS server from the first directive after the
     * certificate to the block's end */
    int in_block = 0, proxying = 0;
    while (fgets(line, sizeof line, in) && !(proxying && strcmp(line, "}\n") == 0)) {
        if (!in_block && !proxying && (strncmp(line, "upstream ", 9) == 0 || strncmp(line, "map ", 4) == 0))
            in_block = 1;
        if (in_block) {
            put_instance_line(f, line, a, b);
            in_block = strcmp(line, "}\n") != 0;
        } else if (proxying || (proxying = strstr(line, "large_client_header_buffers") != NULL)) {
            if (proxying == 1) fprintf(f, "  server {\n    listen 127.0.0.1:%d;\n", listen);
            proxying = 2;
            fputs(line, f);
        }
    }
    fclose(in);
    fprintf(f, "  }\n}\n");
    return fclose(f) || !proxying ? -1 : 0;
}

/* nginx -t on the shipped example, its certificate paths pointed at a throwaway pair. */
static int shipped_conf_valid(const char *nginx, const char *source) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem -days 1 -subj /CN=t "
             ">/dev/null 2>&1 && sed -e 's|/etc/letsencrypt/live/personaplex.example.com/fullchain.pem|%s/cert.pem|' "
             "-e 's|/etc/letsencrypt/live/personaplex.example.com/privkey.pem|%s/key.pem|' "
             "-e 's/listen 80;/listen 127.0.0.1:%d;/' -e 's/listen 443 ssl;/listen 127.0.0.1:%d ssl;/' "
             "'%s/tools/deploy/nginx.conf' > site.conf && printf 'pid %s/t.pid;\\nevents {}\\nhttp {\\n"
             "client_body_temp_path %s/t1; proxy_temp_path %s/t2;\\ninclude %s/site.conf;\\n}\\n' > example.conf && "
             "'%s' -t -q -e '%s/nginx-t.log' -p '%s' -c '%s/example.conf' >>'%s/nginx-t.log' 2>&1",
             g_dir, g_dir, g_dir, sp_free_port(), sp_free_port(), source, g_dir, g_dir, g_dir, g_dir, nginx, g_dir,
             g_dir, g_dir, g_dir);
    return system(cmd) == 0;
}

static void run_proxy(const char *server, const char *source) {
    const char *nginx = find_nginx();
    if (!nginx) TEST_SKIP("nginx is not installed (apt-get install nginx)");
    TEST_COND("the shipped tools/deploy/nginx.conf passes nginx -t", shipped_conf_valid(nginx, source));

    int pa = sp_free_port(), pb = sp_free_port(), pn = sp_free_port();
    pid_t a = start_instance(server, "a", pa, "1"), b = start_instance(server, "b", pb, "2");
    TEST_COND("instance A ready", wait_health(pa, "\"status\":\"ok\"", a));
    TEST_COND("instance B ready", wait_health(pb, "\"status\":\"ok\"", b));
    char conf[300], log[300];
    snprintf(conf, sizeof conf, "%s/nginx.conf", g_dir);
    snprintf(log, sizeof log, "%s/nginx.out", g_dir);
    TEST_COND("nginx configured from the shipped nginx.conf", write_nginx_conf(conf, source, pn, pa, pb) == 0);
    const char *argv[] = {nginx, "-e", "stderr", "-p", g_dir, "-c", conf, NULL};
    pid_t ng = spawn(argv, log);
    TEST_COND("nginx up", wait_health(pn, "\"ready\":true", ng));

    wc_init(0, pn);
    wc_conn one = {0};
    one.path = "/api/chat?text_prompt=Hello+there";
    one.wait_handshake = 1;
    one.linger_ms = 300;
    wc_conn *l1[] = {&one};
    wc_run(l1, 1, NULL, 0, 20000);
    TEST_COND("a conversation through nginx gets the 0x00 handshake", one.handshakes == 1 && !one.errors);
    wc_conn_free(&one);
    /* every WebSocket path gets the upgrade headers through nginx (only /api/chat did: 404) */
    const char *const paths[] = {"/api/chat", "/v1/realtime", "/v1/twilio"};
    for (int i = 0; i < 3; i++) {
        int fd = sp_connect(pn, 0), status = upgrade(fd, paths[i]);
        if (status != 101) printf("%s through nginx: HTTP %d\n", paths[i], status);
        TEST_COND("each WebSocket path upgrades through nginx", status == 101);
        if (fd >= 0) close(fd);
    }
    TEST_COND("those sessions end", wait_health(pa, "\"active\":0", a) && wait_health(pb, "\"active\":0", b));

    pid_t holder = silent_client(pa);
    TEST_COND("A is full", wait_health(pa, "\"status\":\"full\"", a));
    long rejected_before = metric(pa, "personaplex_sessions_rejected_total ");
    wc_conn c[3];
    wc_conn *l[3];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 3; i++) {
        c[i].path = "/api/chat";
        c[i].wait_handshake = 1;
        c[i].linger_ms = 1500;
        l[i] = &c[i];
    }
    wc_run(l, 3, NULL, 0, 20000);
    int handshakes = 0, refused = 0;
    for (int i = 0; i < 3; i++) {
        handshakes += c[i].handshakes == 1 && !c[i].errors;
        refused += !c[i].handshakes;
        printf("proxied %d: handshake %d, errors %d (%s), close %d, fail \"%s\"\n", i, c[i].handshakes, c[i].errors,
               c[i].first_error, c[i].close_code, c[i].fail_reason);
        wc_conn_free(&c[i]);
    }
    wc_shutdown();
    long rejected = metric(pa, "personaplex_sessions_rejected_total ");
    printf("A refused %ld upgrade(s) while full\n", rejected - rejected_before);
    TEST_COND("two conversations through nginx get handshakes although A is full", handshakes == 2);
    TEST_COND("the third, with every instance full, gets none", refused == 1);
    TEST_COND("nginx tried full A and moved on (A refused with 503)", rejected_before >= 0 && rejected > rejected_before);
    /* Every instance full: the upgrade is refused (their 503, or nginx's 502 once it has marked
     * every one busy), and the page and /health still reach an instance. The conversations' group
     * has no live server for 2 s after such a refusal; sent there, they got nginx's 502 page. */
    pid_t b_holders[2] = {silent_client(pb), silent_client(pb)};
    TEST_COND("B is full", wait_health(pb, "\"status\":\"full\"", b));
    int fd = sp_connect(pn, 0), all_full = upgrade(fd, "/api/chat");
    if (fd >= 0) close(fd);
    char body[4096];
    int page = raw_get(pn, "/", body, sizeof body);
    int health = raw_get(pn, "/health", body, sizeof body);
    printf("every instance full, through nginx: upgrade %d, / %d, /health %d %.60s\n", all_full, page, health, body);
    TEST_COND("an upgrade with every instance full is refused", all_full == 503 || all_full == 502);
    TEST_COND("the page still loads through nginx then", page == 200);
    TEST_COND("/health through nginx then is an instance's: 503, status full", health == 503 &&
              strstr(body, "\"status\":\"full\""));
    for (int i = 0; i < 2; i++) {
        kill(b_holders[i], SIGKILL);
        waitpid(b_holders[i], NULL, 0);
    }

    char blog[300];
    snprintf(blog, sizeof blog, "%s/b/server.log", g_dir);
    TEST_COND("B logs the client address nginx passed on (--behind-proxy)",
              test_lines_with(blog, "connected from 127.0.0.1 via ") > 0);

    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    sp_stop(ng);
    TEST_COND("A exits 0 on SIGTERM", sp_stop(a) == 0);
    TEST_COND("B exits 0 on SIGTERM", sp_stop(b) == 0);
}

/* ---- start-up checks ----------------------------------------------------------------------------- */

/* Starts `server ARGS... --port PORT --state-dir DIR/NAME`, its output in DIR/NAME.log. */
static pid_t start_named(const char *server, const char *name, const char *const *args, int port) {
    static char dir[300], log[320], port_s[16];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, name);
    snprintf(log, sizeof log, "%s/%s.log", g_dir, name);
    snprintf(port_s, sizeof port_s, "%d", port);
    const char *argv[MAX_ARGS + 8] = {server};
    int n = 1;
    while (*args && n < MAX_ARGS) argv[n++] = *args++;
    const char *tail[] = {"--port", port_s, "--state-dir", dir, NULL};
    memcpy(argv + n, tail, sizeof tail);
    return spawn(argv, log);
}

/* The exit status of a server that must stop by itself within `seconds`; -1 (and killed) otherwise. */
static int exit_status(pid_t pid, int seconds) {
    int status;
    for (int i = 0; i < 10 * seconds; i++, usleep(100000))
        if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static int logged(const char *name, const char *text) {
    char log[320];
    snprintf(log, sizeof log, "%s/%s.log", g_dir, name);
    return test_lines_with(log, text) > 0;
}

/* Polls name's log for text for up to 30 s, while pid runs. */
static int wait_logged(const char *name, const char *text, pid_t pid) {
    for (int i = 0; i < 300; i++, usleep(100000)) {
        if (logged(name, text)) return 1;
        if (waitpid(pid, NULL, WNOHANG) == pid) return 0;
    }
    return 0;
}

/* The server `name` (pid) says it is ready in its own log, then answers /health on port: the log
 * first, since a port reused between servers may meanwhile answer for another test's server. */
static int wait_ready(const char *name, pid_t pid, int port, const char *health) {
    return wait_logged(name, "server: ready", pid) && wait_health(port, health, pid);
}

/* An IPv4 address of this machine outside 127/8, in out; 0 when it has none. */
static int other_ipv4(struct in_addr *out) {
    struct ifaddrs *list, *i;
    int found = 0;
    if (getifaddrs(&list)) return 0;
    for (i = list; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            *out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
            found = (ntohl(out->s_addr) >> 24) != 127;
        }
    freeifaddrs(list);
    return found;
}

static int connects(struct in_addr addr, int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = addr};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* --host binds that address only (lws bound an IPv4 literal as [::]); one the machine lacks, or
 * a name, stops the start with a message instead of a server that says ready and listens nowhere. */
static void run_host(const char *server) {
    int port = sp_free_port();
    /* a listening socket the server inherits (as from a parent), on another address: not its own */
    struct sockaddr_in other_lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002)};
    int inherited = socket(AF_INET, SOCK_STREAM, 0);
    TEST_COND("a listening socket on 127.0.0.2 to inherit",
              bind(inherited, (struct sockaddr *)&other_lo, sizeof other_lo) == 0 && listen(inherited, 1) == 0);
    const char *loopback[] = {"--no-tls", "--demo", "--host", "127.0.0.1", NULL};
    pid_t pid = start_named(server, "loopback", loopback, port);
    close(inherited);
    TEST_COND("--host 127.0.0.1: /health answers on 127.0.0.1", wait_ready("loopback", pid, port, "\"status\""));
    /* HEAD (wget --spider, a container's health check) gets the GET's status and no body; it got 405 */
    char body[4096];
    const char *const head_paths[] = {"/health/live", "/"};
    for (int i = 0; i < 2; i++) {
        int status = raw_request(port, "HEAD", head_paths[i], body, sizeof body);
        if (status != 200 || body[0]) printf("HEAD %s: HTTP %d, %zu body bytes\n", head_paths[i], status, strlen(body));
        TEST_COND("HEAD answers 200 without a body", status == 200 && !body[0]);
    }
    struct in_addr other;
    if (!other_ipv4(&other)) {
        printf("this machine has no IPv4 address outside 127/8: the other-interface check is skipped\n");
    } else {
        char text[INET_ADDRSTRLEN];
        printf("the other interface: %s\n", inet_ntop(AF_INET, &other, text, sizeof text));
        TEST_COND("--host 127.0.0.1: the machine's other IPv4 address refuses the port", !connects(other, port));
    }
    TEST_COND("--host 127.0.0.1: exits 0 on SIGTERM", sp_stop(pid) == 0);
    const char *absent[] = {"--no-tls", "--demo", "--host", "192.0.2.77", NULL};
    TEST_COND("--host 192.0.2.77 (not this machine's) exits 2",
              exit_status(start_named(server, "absent", absent, port), 30) == 2);
    TEST_COND("... naming the address", logged("absent", "--host 192.0.2.77: cannot bind it"));
    port = sp_free_port(); /* a server that listens on a fresh port: another test may hold the one released */
    const char *localhost[] = {"--no-tls", "--demo", "--host", "localhost", NULL};
    pid = start_named(server, "localhost", localhost, port);
    TEST_COND("--host localhost: /health answers on 127.0.0.1", wait_ready("localhost", pid, port, "\"status\""));
    TEST_COND("--host localhost: exits 0 on SIGTERM", sp_stop(pid) == 0);
    const char *name[] = {"--no-tls", "--demo", "--host", "example.invalid", NULL};
    TEST_COND("--host example.invalid (a name) exits 2", exit_status(start_named(server, "name", name, port), 30) == 2);
    TEST_COND("... saying names are refused", logged("name", "'example.invalid' is not a numeric"));
}

/* Without --weights the server takes the first checkpoint in --models-dir (it said "--weights FILE
 * is required"); an empty one stops the start naming it. The checkpoint is the demo model's. */
/* Runs the demo server once for the model files it writes; their directory. */
static const char *demo_files(const char *server, int port) {
    static char files[300];
    const char *demo[] = {"--no-tls", "--demo", "--host", "127.0.0.1", NULL};
    pid_t pid = start_named(server, "demo", demo, port);
    TEST_COND("the demo server writes its model",
              wait_ready("demo", pid, port, "\"status\":\"ok\"") && sp_stop(pid) == 0);
    snprintf(files, sizeof files, "%s/demo/demo", g_dir);
    return files;
}

static void run_models(const char *server) {
    int port = sp_free_port();
    const char *files = demo_files(server, port);
    char models[300], link[400], target[400], mimi[400], tok[400], voices[400];
    snprintf(models, sizeof models, "%s/models", g_dir);
    mkdir(models, 0755);
    const char *pairs[][2] = {{"lm.safetensors", "model-turbo2bit.safetensors"}, {"config.json", "config.json"}};
    for (int i = 0; i < 2; i++) {
        snprintf(target, sizeof target, "%s/%s", files, pairs[i][0]);
        snprintf(link, sizeof link, "%s/%s", models, pairs[i][1]);
        TEST_COND("checkpoint linked into the models dir", symlink(target, link) == 0);
    }
    snprintf(mimi, sizeof mimi, "%s/mimi/mimi.safetensors", files);
    snprintf(tok, sizeof tok, "%s/tokenizer.model", files);
    snprintf(voices, sizeof voices, "%s/voices", files);
    const char *found[] = {"--no-tls", "--models-dir", models, "--mimi",   mimi,        "--tokenizer",
                           tok,        "--voices-dir", voices, "--host", "127.0.0.1", NULL};
    port = sp_free_port(); /* the demo server's may have gone to another test meanwhile */
    pid_t pid = start_named(server, "found", found, port);
    TEST_COND("--models-dir without --weights: the server gets ready",
              wait_ready("found", pid, port, "\"status\":\"ok\""));
    TEST_COND("... on the checkpoint found there", logged("found", "no --weights given: using") &&
                                                        logged("found", "model-turbo2bit.safetensors"));
    TEST_COND("... and exits 0 on SIGTERM", sp_stop(pid) == 0);
    char empty[300];
    snprintf(empty, sizeof empty, "%s/empty", g_dir);
    mkdir(empty, 0755);
    const char *none[] = {"--no-tls", "--models-dir", empty, "--host", "127.0.0.1", NULL};
    TEST_COND("an empty --models-dir exits 2", exit_status(start_named(server, "none", none, port), 30) == 2);
    TEST_COND("... naming it", logged("none", empty));
    /* the tokenizer is read after the LM (minutes for the 7B): one that is not there stops the start first */
    snprintf(target, sizeof target, "%s/lm.safetensors", files);
    const char *notok[] = {"--no-tls",      "--weights",    target, "--mimi", mimi,        "--tokenizer",
                           "/nonexistent-tok.model", "--voices-dir", voices, "--host", "127.0.0.1", NULL};
    TEST_COND("a --tokenizer that is not there exits 2",
              exit_status(start_named(server, "notok", notok, port), 30) == 2);
    TEST_COND("... before the LM loads, naming the option and the file",
              logged("notok", "--tokenizer /nonexistent-tok.model: cannot read it") &&
                  !logged("notok", "cannot load the model"));
}

/* A voices dir that is missing or empty, or a default --voice not in it, stops the start (exit 2,
 * naming the option and the voices there) instead of a server whose every conversation fails. */
static void run_voices(const char *server) {
    int port = sp_free_port();
    char empty[300], some[300], file[400];
    snprintf(empty, sizeof empty, "%s/empty", g_dir);
    snprintf(some, sizeof some, "%s/voices", g_dir);
    mkdir(empty, 0755);
    mkdir(some, 0755);
    snprintf(file, sizeof file, "%s/NATM1.pt", some); /* listed by name: its content is not read here */
    fclose(fopen(file, "w"));
    const char *missing[] = {"--no-tls", "--demo", "--host", "127.0.0.1", "--voices-dir", "/nonexistent-voices", NULL};
    TEST_COND("a missing --voices-dir exits 2", exit_status(start_named(server, "missing", missing, port), 30) == 2);
    TEST_COND("... naming it", logged("missing", "--voices-dir /nonexistent-voices: cannot open it"));
    const char *none[] = {"--no-tls", "--demo", "--host", "127.0.0.1", "--voices-dir", empty, NULL};
    TEST_COND("an empty --voices-dir exits 2", exit_status(start_named(server, "none", none, port), 30) == 2);
    TEST_COND("... saying it holds no voices", logged("none", "holds no voices"));
    const char *bad[] = {"--no-tls", "--demo", "--host", "127.0.0.1", "--voices-dir", some, "--voice", "NOPE", NULL};
    TEST_COND("a --voice not in --voices-dir exits 2", exit_status(start_named(server, "bad", bad, port), 30) == 2);
    TEST_COND("... listing the voices there", logged("bad", "--voice 'NOPE' is not in --voices-dir") &&
                                                  logged("bad", "(it has NATM1)"));
}

/* Under --echo-cancel auto (the default) any conversation may ask for echo cancellation, so the
 * capacity plan times it and counts it for every conversation, as under on; off counts none. */
static void run_echo(const char *server) {
    int port = sp_free_port();
    const char *dflt[] = {"--no-tls", "--demo", "--host", "127.0.0.1", NULL};
    pid_t pid = start_named(server, "auto", dflt, port);
    TEST_COND("the default --echo-cancel auto: the server gets ready", wait_ready("auto", pid, port, "\"status\""));
    TEST_COND("... with echo cancellation in its capacity plan",
              logged("auto", "server: capacity:") && logged("auto", "and echo cancellation"));
    TEST_COND("... and exits 0 on SIGTERM", sp_stop(pid) == 0);
    port = sp_free_port();
    const char *off[] = {"--no-tls", "--demo", "--host", "127.0.0.1", "--echo-cancel", "off", NULL};
    pid = start_named(server, "off", off, port);
    TEST_COND("--echo-cancel off: the server gets ready", wait_ready("off", pid, port, "\"status\""));
    TEST_COND("... without echo cancellation in its plan",
              logged("off", "server: capacity:") && !logged("off", "and echo cancellation"));
    TEST_COND("... and exits 0 on SIGTERM", sp_stop(pid) == 0);
}

/* A self-signed EC pair valid for `days` days (openssl cannot date one in the past: 10 days stands
 * for "expires soon", which takes the same path as expired). */
static int make_pair(const char *cert, const char *key, int days) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days %d -subj /CN=localhost "
             "-keyout '%s' -out '%s' >/dev/null 2>&1",
             days, key, cert);
    return system(cmd) == 0;
}

/* The generated certificate is replaced when it has 30 days left or less (an expired one was served
 * as it was); an operator's --cert that close to expiry is warned about. */
static void run_cert(const char *server) {
    int port = sp_free_port();
    char state[300], cert[320], key[320], old[320];
    snprintf(state, sizeof state, "%s/renew", g_dir);
    snprintf(cert, sizeof cert, "%s/cert.pem", state);
    snprintf(key, sizeof key, "%s/key.pem", state);
    snprintf(old, sizeof old, "%s/old.pem", g_dir);
    mkdir(state, 0700);
    /* a second link keeps the old certificate: the server replaces the file by a rename */
    TEST_COND("a 10-day pair in the state dir", make_pair(cert, key, 10) && link(cert, old) == 0);
    const char *renew[] = {"--demo", "--host", "127.0.0.1", NULL};
    pid_t pid = start_named(server, "renew", renew, port);
    TEST_COND("the server starts with TLS", wait_logged("renew", "listening on https://", pid));
    TEST_COND("... saying it replaces the expiring certificate", logged("renew", "generating a new one"));
    TEST_COND("... and serves a new one", !test_files_equal(cert, old));
    TEST_COND("... exits 0 on SIGTERM", sp_stop(pid) == 0);
    char op_cert[320], op_key[320];
    snprintf(op_cert, sizeof op_cert, "%s/op-cert.pem", g_dir);
    snprintf(op_key, sizeof op_key, "%s/op-key.pem", g_dir);
    TEST_COND("an operator's 10-day pair", make_pair(op_cert, op_key, 10));
    const char *op[] = {"--demo", "--host", "127.0.0.1", "--cert", op_cert, "--key", op_key, NULL};
    pid = start_named(server, "operator", op, port);
    TEST_COND("--cert: the server starts with it", wait_logged("operator", "listening on https://", pid));
    TEST_COND("... warning that it expires soon", logged("operator", "expires in 9 days") ||
                                                      logged("operator", "expires in 10 days"));
    TEST_COND("... exits 0 on SIGTERM", sp_stop(pid) == 0);
}

/* Copies the file at from into the FIFO at fifo (opening it waits for the server to read it). */
static int feed(const char *fifo, const char *from) {
    char buf[65536];
    int in = open(from, O_RDONLY), out = open(fifo, O_WRONLY);
    ssize_t n = 0;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) n = -1;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    return in >= 0 && out >= 0 && n == 0;
}

/* SIGTERM while the model loads (its tokenizer a FIFO the test writes when it likes, so the load
 * waits): a second signal ends the server at once (it waited for the load, deaf to signals), and
 * a load that ends during the stop sends no READY=1 after STOPPING=1. */
static void run_signal(const char *server) {
    int port = sp_free_port();
    const char *files = demo_files(server, port);
    char weights[400], mimi[400], tok[400], voices[400], fifo[300];
    snprintf(weights, sizeof weights, "%s/lm.safetensors", files);
    snprintf(mimi, sizeof mimi, "%s/mimi/mimi.safetensors", files);
    snprintf(tok, sizeof tok, "%s/tokenizer.model", files);
    snprintf(voices, sizeof voices, "%s/voices", files);
    snprintf(fifo, sizeof fifo, "%s/tokenizer.fifo", g_dir);
    TEST_COND("a FIFO for the tokenizer", mkfifo(fifo, 0600) == 0);
    const char *args[] = {"--no-tls", "--weights", weights, "--mimi", mimi, "--tokenizer", fifo,
                          "--voices-dir", voices, "--host", "127.0.0.1", NULL};
    pid_t pid = start_named(server, "twice", args, port);
    TEST_COND("the server listens while its load waits", wait_logged("twice", "listening on", pid));
    kill(pid, SIGTERM);
    TEST_COND("the first SIGTERM starts the stop", wait_logged("twice", "draining", pid));
    kill(pid, SIGTERM);
    TEST_COND("a second SIGTERM during the load ends the server within 5 s", exit_status(pid, 5) == 0);
    TEST_COND("... saying so", logged("twice", "stopped during the model load"));

    TEST_COND("notification socket", notify_socket(0) >= 0);
    pid = start_named(server, "once", args, port);
    TEST_COND("again, the server listens while its load waits", wait_logged("once", "listening on", pid));
    kill(pid, SIGTERM);
    TEST_COND("one SIGTERM starts the stop", wait_logged("once", "draining", pid));
    TEST_COND("the load is let go on", feed(fifo, tok));
    TEST_COND("the server exits 0 once it has loaded", exit_status(pid, 30) == 0);
    const char *notes = notify_read();
#ifdef PP_HAVE_SYSTEMD
    TEST_COND("STOPPING=1 sent", strstr(notes, "STOPPING=1") != NULL);
#endif
    TEST_COND("no READY=1 after it", !strstr(notes, "READY=1"));
}

int main(int argc, char **argv) {
    const int drain = argc >= 3 && strcmp(argv[1], "drain") == 0,
              unread = argc >= 3 && strcmp(argv[1], "drain-unread") == 0,
              host = argc >= 3 && strcmp(argv[1], "host") == 0, models = argc >= 3 && strcmp(argv[1], "models") == 0,
              voices = argc >= 3 && strcmp(argv[1], "voices") == 0, cert = argc >= 3 && strcmp(argv[1], "cert") == 0,
              sig = argc >= 3 && strcmp(argv[1], "signal") == 0, echo = argc >= 3 && strcmp(argv[1], "echo") == 0;
    if (argc < 3 ||
        (!drain && !unread && !host && !models && !voices && !cert && !sig && !echo && strcmp(argv[1], "proxy") != 0)) {
        fprintf(stderr, "usage: test_deploy drain|drain-unread SERVER [ARG...] | proxy SERVER SOURCE_DIR | "
                        "host|models|voices|cert|signal|echo SERVER\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(g_dir, sizeof g_dir, "/tmp/pp-deploy-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    if (drain || unread)
        run_drain(argv[2], unread, argc - 3, argv + 3);
    else if (host)
        run_host(argv[2]);
    else if (models)
        run_models(argv[2]);
    else if (voices)
        run_voices(argv[2]);
    else if (cert)
        run_cert(argv[2]);
    else if (sig)
        run_signal(argv[2]);
    else if (echo)
        run_echo(argv[2]);
    else run_proxy(argv[2], argc > 3 ? argv[3] : ".");
    int rc = test_report();
    if (!rc) {
        test_remove_dir(g_dir);
    } else {
        printf("logs kept in %s\n", g_dir);
    }
    return rc;
}
