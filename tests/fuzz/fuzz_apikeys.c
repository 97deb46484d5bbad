/* fuzz_apikeys: the API-key extraction from an Authorization header, a token query value and a
 * Cookie header (three NUL-separated parts of the input), then the check against a key set. The
 * presented key must lie inside the part its source names, and only a key of the set may pass.
 * The first two parts also go through the Origin/Host comparison, and the third, as an
 * --allowed-origins list, through its check and the lookup of the first part as an Origin. */
#include "base/err.h"
#include "base/log.h"
#include "server/apikeys.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEY "k3y-for-the-fuzzer"

static apikeys *keys(void) {
    static apikeys *k;
    if (k) return k;
    char path[] = "/tmp/fuzz_apikeys_XXXXXX", err[PP_ERR_LEN];
    int fd = mkstemp(path);
    static const char file[] = "# comment\n\n  " KEY "  \n";
    if (fd < 0 || write(fd, file, sizeof file - 1) != (ssize_t)(sizeof file - 1)) abort();
    close(fd);
    if (apikeys_load(path, &k, err)) abort();
    unlink(path);
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet++) pp_log_set_level(PP_LOG_ERROR);
    char *buf = malloc(size + 3), *part[3];
    memcpy(buf, data, size);
    buf[size] = buf[size + 1] = buf[size + 2] = '\0';
    part[0] = buf;
    for (int i = 1; i < 3; i++) part[i] = part[i - 1] + strlen(part[i - 1]) + 1;
    size_t len = 0;
    apikeys_source source;
    const char *k = apikeys_presented(part[0][0] ? part[0] : NULL, part[1][0] ? part[1] : NULL,
                                      part[2][0] ? part[2] : NULL, &len, &source);
    if (k) {
        /* inside the part its source names */
        int from = source == APIKEYS_FROM_HEADER ? 0 : source == APIKEYS_FROM_QUERY ? 1 : 2;
        if (k < part[from] || k + len > part[from] + strlen(part[from])) abort();
        if (apikeys_check(keys(), k, len) != (len == strlen(KEY) && !memcmp(k, KEY, len))) abort();
    }
    /* the first two parts as an Origin and a Host: a port the Host leaves out only widens */
    if (apikeys_same_origin(part[0], part[1], 0) && !apikeys_same_origin(part[0], part[1], 1)) abort();
    /* the third as an --allowed-origins list: a list of one origin that passes its check lists that
     * origin, and an origin listed stays listed when the list also allows any */
    char err[PP_ERR_LEN];
    int list_ok = part[2][0] && apikeys_origins_check(part[2], err) == PP_OK;
    if (list_ok && !strpbrk(part[2], ", ") && !apikeys_origin_listed(part[2], part[2])) abort();
    int listed = apikeys_origin_listed(part[2], part[0]);
    size_t n = strlen(part[2]);
    char *with_any = malloc(n + 3);
    memcpy(with_any, part[2], n);
    memcpy(with_any + n, ",*", 3);
    if (listed && !apikeys_origin_listed(with_any, part[0])) abort();
    if (!apikeys_origin_listed(with_any, part[0])) abort(); /* "*" lists every origin */
    free(with_any);
    free(buf);
    return 0;
}
