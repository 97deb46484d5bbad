/* apikeys: see apikeys.h. */
#include "server/apikeys.h"

#include "base/err.h"
#include "base/log.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef struct keyset {
    char (*keys)[APIKEYS_MAX_KEY + 1];
    int n;
} keyset;

struct apikeys {
    char *path;
    pthread_rwlock_t lock;
    keyset set;
};

static int read_keys(const char *path, keyset *out, char *err) {
    FILE *f = fopen(path, "r");
    if (!f) return pp_fail(err, PP_EIO, "--api-keys %s: cannot read it", path);
    struct stat st; /* every key opens the server: a file others can read gives it to them */
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        PP_WARN("server", "--api-keys %s is open to other users (mode %03o); chmod 600 it", path,
                (unsigned)(st.st_mode & 0777));
    keyset s = {0};
    int cap = 0, rc = PP_OK, line_no = 0;
    char line[1024];
    while (!rc && fgets(line, sizeof line, f)) {
        line_no++;
        char *a = line, *b = line + strlen(line);
        while (*a && isspace((unsigned char)*a)) a++;
        while (b > a && isspace((unsigned char)b[-1])) b--;
        if (a == b || *a == '#') continue;
        if (b - a > APIKEYS_MAX_KEY) {
            rc = pp_fail(err, PP_EINVAL, "--api-keys %s: line %d: a key longer than %d bytes", path, line_no,
                         APIKEYS_MAX_KEY);
            break;
        }
        /* cookie-safe: the page gets the key back as a cookie (RFC 6265 cookie-octets) */
        for (const char *c = a; c < b && !rc; c++)
            if (*c < 0x21 || *c > 0x7e || *c == '"' || *c == ',' || *c == ';' || *c == '\\')
                rc = pp_fail(err, PP_EINVAL, "--api-keys %s: line %d: a key may hold only visible ASCII other than "
                             "quotes, commas, semicolons and backslashes", path, line_no);
        if (rc) break;
        if (s.n == cap) {
            cap = cap ? 2 * cap : 8;
            void *k = realloc(s.keys, (size_t)cap * sizeof *s.keys);
            if (!k) {
                rc = pp_fail(err, PP_ENOMEM, "--api-keys %s: out of memory", path);
                break;
            }
            s.keys = k;
        }
        memset(s.keys[s.n], 0, sizeof s.keys[s.n]);
        memcpy(s.keys[s.n++], a, (size_t)(b - a));
    }
    fclose(f);
    if (!rc && s.n == 0) rc = pp_fail(err, PP_EINVAL, "--api-keys %s: no key in the file", path);
    if (rc) free(s.keys);
    else *out = s;
    return rc;
}

int apikeys_load(const char *path, apikeys **out, char *err) {
    apikeys *k = calloc(1, sizeof *k);
    if (!k || !(k->path = strdup(path))) {
        free(k);
        return pp_fail(err, PP_ENOMEM, "--api-keys: out of memory");
    }
    int rc = read_keys(path, &k->set, err);
    if (rc) {
        free(k->path);
        free(k);
        return rc;
    }
    pthread_rwlock_init(&k->lock, NULL);
    PP_INFO("server", "--api-keys %s: %d key%s; every endpoint but /health needs one", path, k->set.n,
            k->set.n == 1 ? "" : "s");
    *out = k;
    return PP_OK;
}

int apikeys_reload(apikeys *k, char *err) {
    keyset s;
    int rc = read_keys(k->path, &s, err);
    if (rc) return rc;
    pthread_rwlock_wrlock(&k->lock);
    keyset old = k->set;
    k->set = s;
    pthread_rwlock_unlock(&k->lock);
    free(old.keys);
    PP_INFO("server", "--api-keys %s: reloaded, %d key%s", k->path, s.n, s.n == 1 ? "" : "s");
    return PP_OK;
}

void apikeys_free(apikeys *k) {
    if (!k) return;
    pthread_rwlock_destroy(&k->lock);
    free(k->set.keys);
    free(k->path);
    free(k);
}

int apikeys_count(apikeys *k) {
    pthread_rwlock_rdlock(&k->lock);
    int n = k->set.n;
    pthread_rwlock_unlock(&k->lock);
    return n;
}

/* Equal in time that depends only on the stored key's fixed size, not on where they differ. */
static int same_key(const char stored[APIKEYS_MAX_KEY + 1], const char *key, size_t len) {
    unsigned diff = len > APIKEYS_MAX_KEY;
    for (size_t i = 0; i < APIKEYS_MAX_KEY; i++) diff |= (unsigned char)stored[i] ^ (unsigned char)(i < len ? key[i] : 0);
    return diff == 0;
}

int apikeys_check(apikeys *k, const char *key, size_t len) {
    int ok = 0;
    pthread_rwlock_rdlock(&k->lock);
    for (int i = 0; i < k->set.n; i++) ok |= same_key(k->set.keys[i], key, len);
    pthread_rwlock_unlock(&k->lock);
    return ok;
}

/* The value of cookie `name` in a Cookie header ("a=1; b=2"). */
static const char *cookie_value(const char *cookie, const char *name, size_t *len) {
    size_t n = strlen(name);
    for (const char *p = cookie; p && *p;) {
        while (*p == ' ' || *p == ';') p++;
        const char *end = strchr(p, ';');
        if (!end) end = p + strlen(p);
        if ((size_t)(end - p) > n && !strncmp(p, name, n) && p[n] == '=') {
            *len = (size_t)(end - p - (ptrdiff_t)n - 1);
            return p + n + 1;
        }
        p = end;
    }
    return NULL;
}

const char *apikeys_presented(const char *authorization, const char *token, const char *cookie, size_t *len,
                              apikeys_source *source) {
    if (authorization && !strncmp(authorization, "Bearer ", 7)) {
        const char *k = authorization + 7;
        while (*k == ' ') k++;
        *len = strlen(k);
        while (*len && k[*len - 1] == ' ') (*len)--;
        *source = APIKEYS_FROM_HEADER;
        return k;
    }
    if (token) {
        *len = strlen(token);
        *source = APIKEYS_FROM_QUERY;
        return token;
    }
    *source = APIKEYS_FROM_COOKIE;
    return cookie ? cookie_value(cookie, APIKEYS_COOKIE, len) : NULL;
}

/* Splits "host[:port]" (an IPv6 literal in brackets) into the host and its port; *port is 0 when
 * none is written. 0, or -1 when it is not of that form. */
static int split_authority(const char *a, const char **host, size_t *host_len, unsigned *port) {
    const char *colon;
    if (a[0] == '[') {
        const char *close = strchr(a, ']');
        if (!close) return -1;
        colon = close[1] == ':' ? close + 1 : NULL;
        if (!colon && close[1]) return -1;
    } else {
        colon = strchr(a, ':');
        if (colon && strchr(colon + 1, ':')) return -1;
    }
    *host = a;
    *host_len = colon ? (size_t)(colon - a) : strlen(a);
    *port = 0;
    if (!*host_len) return -1;
    if (!colon) return 0;
    if (!colon[1]) return -1;
    for (const char *d = colon + 1; *d; d++) {
        if (*d < '0' || *d > '9' || *port > 65535) return -1;
        *port = *port * 10 + (unsigned)(*d - '0');
    }
    return *port >= 1 && *port <= 65535 ? 0 : -1;
}

/* A browser origin, scheme://host[:port]: *scheme_port gets its scheme's default port (80, 443),
 * *port the one it names or that default. -1 when it is not one ("null", another scheme). */
static int parse_origin(const char *origin, const char **host, size_t *host_len, unsigned *port,
                        unsigned *scheme_port) {
    *scheme_port = !strncasecmp(origin, "http://", 7) ? 80 : !strncasecmp(origin, "https://", 8) ? 443 : 0;
    if (!*scheme_port || split_authority(strstr(origin, "://") + 3, host, host_len, port)) return -1;
    for (size_t i = 0; i < *host_len; i++) /* a name or an address: no path, query, user or space */
        if (!isalnum((unsigned char)(*host)[i]) && !strchr("-.[]:", (*host)[i])) return -1;
    if (!*port) *port = *scheme_port;
    return 0;
}

#define ORIGIN_MAX 512 /* bytes of one entry of an origin list */

/* Copies the next comma-separated entry of *list, spaces trimmed, into entry and advances *list
 * past it: 1, or -1 when the entry is too long for entry (a cut copy); 0 when the list is done. */
static int next_origin(const char **list, char entry[ORIGIN_MAX]) {
    const char *e = *list;
    if (!*e) return 0;
    size_t n = strcspn(e, ",");
    *list = e + n + (e[n] == ',');
    while (n && *e == ' ') e++, n--;
    while (n && e[n - 1] == ' ') n--;
    int fits = n < ORIGIN_MAX;
    if (!fits) n = ORIGIN_MAX - 1;
    memcpy(entry, e, n);
    entry[n] = '\0';
    return fits ? 1 : -1;
}

int apikeys_origin_listed(const char *list, const char *origin) {
    const char *host, *listed_host;
    size_t host_len, listed_len;
    unsigned port, scheme, listed_port, listed_scheme;
    int is_origin = parse_origin(origin, &host, &host_len, &port, &scheme) == 0;
    char entry[ORIGIN_MAX];
    for (int got; (got = next_origin(&list, entry)) != 0;) {
        if (got < 0) continue; /* refused by apikeys_origins_check */
        if (!strcmp(entry, "*")) return 1;
        if (is_origin && !parse_origin(entry, &listed_host, &listed_len, &listed_port, &listed_scheme) &&
            listed_scheme == scheme && listed_port == port && listed_len == host_len &&
            !strncasecmp(listed_host, host, host_len))
            return 1;
    }
    return 0;
}

int apikeys_origins_check(const char *list, char *err) {
    const char *host;
    size_t host_len;
    unsigned port, scheme;
    char entry[ORIGIN_MAX];
    if (!*list) return pp_fail(err, PP_EINVAL, "--allowed-origins is empty (\"*\" allows any origin)");
    for (int got; (got = next_origin(&list, entry)) != 0;)
        if (got < 0)
            return pp_fail(err, PP_EINVAL, "--allowed-origins: an entry over %d bytes ('%.40s...')", ORIGIN_MAX - 1,
                           entry);
        else if (strcmp(entry, "*") && parse_origin(entry, &host, &host_len, &port, &scheme))
            return pp_fail(err, PP_EINVAL,
                           "--allowed-origins: '%s' is not an origin (http://host or https://host, an optional "
                           ":port, no path) nor *",
                           entry);
    return PP_OK;
}

int apikeys_same_origin(const char *origin, const char *host, int host_port_optional) {
    unsigned default_port = !strncmp(origin, "http://", 7) ? 80 : !strncmp(origin, "https://", 8) ? 443 : 0;
    if (!default_port) return 0; /* "null" (a sandboxed or file: page) or another scheme */
    const char *origin_host, *want_host;
    size_t origin_len, want_len;
    unsigned origin_port, want_port;
    if (split_authority(strstr(origin, "://") + 3, &origin_host, &origin_len, &origin_port) ||
        split_authority(host, &want_host, &want_len, &want_port))
        return 0;
    if (origin_len != want_len || strncasecmp(origin_host, want_host, origin_len)) return 0;
    if (!origin_port) origin_port = default_port;
    if (want_port) return origin_port == want_port;
    return host_port_optional || origin_port == default_port;
}
