/* server_process: see server_process.h. */
#define _DEFAULT_SOURCE
#include "server_process.h"

#include "audio/opus.h"
#include "audio/wav.h"
#include "base/err.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int sp_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

int sp_connect(int port, int rcvbuf) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

pid_t sp_spawn(const char *const *argv, const char *log_path) {
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* a crashed or killed driver takes its server along */
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

int sp_get(const char *path, wc_http *h, double timeout_ms) {
    memset(h, 0, sizeof *h);
    h->path = path;
    wc_run(NULL, 0, &h, 1, timeout_ms);
    return h->done ? h->status : -1;
}

double sp_metric(const char *body, const char *name) {
    size_t len = strlen(name);
    for (const char *line = body; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (strncmp(line, name, len) == 0 && line[len] == ' ') return atof(line + len + 1);
    return -1;
}

int sp_wait_ready(pid_t pid, double timeout_s) {
    for (int i = 0; i < (int)(timeout_s * 10); i++) {
        wc_http h;
        int ok = sp_get("/health", &h, 2000) == 200 && h.body && strstr(h.body, "\"ready\":true");
        wc_http_free(&h);
        if (ok) return 1;
        if (waitpid(pid, NULL, WNOHANG) == pid) return 0;
        usleep(100000);
    }
    return 0;
}

int sp_stop(pid_t pid) {
    int status = 0;
    kill(pid, SIGTERM);
    for (int i = 0; i < 300 && waitpid(pid, &status, WNOHANG) == 0; i++) usleep(100000);
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int add_msg(sp_msgs *l, const uint8_t *page, size_t len) {
    wc_msg *m = &l->m[l->n];
    if (!(m->data = malloc(len + 1))) return -1;
    m->data[0] = 0x01;
    memcpy(m->data + 1, page, len);
    m->len = len + 1;
    m->text = 0;
    l->n++;
    return 0;
}

int sp_uplink_wav(const char *wav_path, int frames, sp_msgs *out, char *err) {
    pp_wav w;
    memset(out, 0, sizeof *out);
    int rc = pp_wav_read(wav_path, PP_WAV_MIX, &w, err);
    if (rc) return rc;
    pp_downlink *d = NULL;
    if (w.rate != PP_SAMPLE_RATE || w.frames < 1)
        rc = pp_fail(err, PP_EINVAL, "%s: %d Hz; the uplink needs %d Hz audio", wav_path, w.rate, PP_SAMPLE_RATE);
    if (!rc) rc = pp_downlink_open(&d, 0, err);
    if (!rc && !(out->m = calloc((size_t)frames + 2, sizeof *out->m))) rc = pp_fail(err, PP_ENOMEM, "out of memory");
    uint8_t page[PP_DOWNLINK_MAX_PAGE];
    size_t len;
    for (int i = 0; !rc && i < 2; i++) {
        rc = pp_downlink_header(d, i, page, sizeof page, &len, err);
        if (!rc && add_msg(out, page, len)) rc = pp_fail(err, PP_ENOMEM, "out of memory");
    }
    float pcm[PP_FRAME_SAMPLES];
    int64_t at = 0;
    for (int f = 0; !rc && f < frames; f++) {
        for (int i = 0; i < PP_FRAME_SAMPLES; i++, at = (at + 1) % w.frames) pcm[i] = w.pcm[at];
        rc = pp_downlink_encode(d, pcm, page, sizeof page, &len, err);
        if (!rc && add_msg(out, page, len)) rc = pp_fail(err, PP_ENOMEM, "out of memory");
    }
    pp_downlink_close(d);
    pp_wav_free(&w);
    if (rc) sp_msgs_free(out);
    return rc;
}

void sp_msgs_free(sp_msgs *l) {
    for (int i = 0; i < l->n; i++) free(l->m[i].data);
    free(l->m);
    l->m = NULL;
    l->n = 0;
}
