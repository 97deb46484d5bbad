/* apikeys: the keys a client must present when the server runs with --api-keys FILE.
 *
 * FILE holds one key per line (surrounding spaces trimmed; blank lines and lines starting with
 * '#' ignored; visible ASCII other than " , ; and \, so a key can travel as a cookie). A request presents a key as `Authorization: Bearer KEY`, as a `token=KEY` query
 * parameter (for browsers, which cannot set headers on a WebSocket), or as the `pp_token` cookie
 * the server sets when a page is opened with ?token=, so the page's own assets and its socket
 * carry it; the cookie counts only on a request from the server's own origin (no cross-site
 * WebSocket with the user's key). Keys are compared in constant time and never logged. apikeys_reload (SIGHUP) swaps in
 * the file's current keys, or keeps the old set when the file cannot be read; either warns
 * when the file is open to other users than its owner. Thread-safe. */
#ifndef PP_SERVER_APIKEYS_H
#define PP_SERVER_APIKEYS_H

#include <stddef.h>

#define APIKEYS_COOKIE "pp_token"
#define APIKEYS_MAX_KEY 256 /* bytes of one key */

typedef struct apikeys apikeys;

/* Reads FILE; an unreadable file, or one without a key, is an error naming it. */
int apikeys_load(const char *path, apikeys **out, char *err);
int apikeys_reload(apikeys *k, char *err);
void apikeys_free(apikeys *k);
/* Number of keys now in force. */
int apikeys_count(apikeys *k);
/* 1 when key (len bytes, not NUL-terminated) is one of them. */
int apikeys_check(apikeys *k, const char *key, size_t len);
/* Where a presented key came from. */
typedef enum { APIKEYS_FROM_HEADER, APIKEYS_FROM_QUERY, APIKEYS_FROM_COOKIE } apikeys_source;
/* The key a request presents, from an Authorization header value (may be NULL), a `token`
 * query value (may be NULL) or a Cookie header value (may be NULL), in that order of precedence;
 * *len gets its length and *source where it came from. NULL when none is presented. */
const char *apikeys_presented(const char *authorization, const char *token, const char *cookie, size_t *len,
                              apikeys_source *source);
/* Whether a browser request's Origin header value (scheme://host[:port]) names the site its Host
 * header value (host[:port]) addresses: the same host, case aside, and the same port (the
 * scheme's default when the origin writes none). A Host without a port matches any port of the
 * origin's host when host_port_optional (a proxy's `Host $host` drops it), else only the default
 * one. The browser sends the key cookie with a WebSocket opened by any page of the same site,
 * another port or subdomain included: a cookie is a key only from the page's own origin. */
int apikeys_same_origin(const char *origin, const char *host, int host_port_optional);
/* Whether origin (a browser's Origin header value) is in list, --allowed-origins: comma-separated
 * origins (scheme://host[:port], http or https) compared as origins are (the scheme and the host
 * in any case, a scheme's default port written or not), or "*" for any. */
int apikeys_origin_listed(const char *list, const char *origin);
/* PP_OK when every entry of an --allowed-origins list is "*" or an origin; else PP_EINVAL naming
 * the first that is not (a path, another scheme, an empty entry). */
int apikeys_origins_check(const char *list, char *err);

#endif
