/* apikeys: the keys a client must present when the server runs with --api-keys FILE.
 *
 * FILE holds one key per line (surrounding spaces trimmed; blank lines and lines starting with
 * '#' ignored; visible ASCII other than " , ; and \, so a key can travel as a cookie). A request presents a key as `Authorization: Bearer KEY`, as a `token=KEY` query
 * parameter (for browsers, which cannot set headers on a WebSocket), or as the `pp_token` cookie
 * the server sets when a page is opened with ?token=, so the page's own assets and its socket
 * carry it. Keys are compared in constant time and never logged. apikeys_reload (SIGHUP) swaps in
 * the file's current keys, or keeps the old set when the file cannot be read. Thread-safe. */
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
/* The key a request presents, from an Authorization header value (may be NULL), a `token`
 * query value (may be NULL) or a Cookie header value (may be NULL), in that order of precedence;
 * *len gets its length. NULL when none is presented. */
const char *apikeys_presented(const char *authorization, const char *token, const char *cookie, size_t *len);

#endif
