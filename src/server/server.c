/* server: the shared state's accessors (see server.h), in one place that every other server
 * file may call without calling each other. */
#include "server/server.h"

#include "base/log.h"

#include <stdlib.h>

engine *server_engine(server *s, pp_model **model) {
    pthread_mutex_lock(&s->lock);
    engine *e = s->engine;
    *model = s->model;
    pthread_mutex_unlock(&s->lock);
    return e;
}

void server_publish(server *s, pp_model *model, engine *e, const char *load_error) {
    pthread_mutex_lock(&s->lock);
    if (load_error) {
        s->failed = 1;
        snprintf(s->load_error, sizeof s->load_error, "%s", load_error);
    }
    s->model = model;
    s->engine = e;
    pthread_mutex_unlock(&s->lock);
}

int server_draining(const server *s) { return atomic_load(&s->draining); }

void server_start_draining(server *s) { atomic_store(&s->draining, 1); }

/* Whether the request came from no page (no Origin header: a program, or a browser fetching the
 * page's own assets) or from a page of this server's origin. */
static int same_origin(server *s, struct lws *wsi) {
    char origin[512], host[512];
    if (lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) <= 0) return 1;
    return lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN) > 0 &&
           lws_hdr_copy(wsi, host, sizeof host, WSI_TOKEN_HOST) > 0 &&
           apikeys_same_origin(origin, host, s->opt->behind_proxy);
}

int server_origin_allowed(server *s, struct lws *wsi, char *origin, size_t cap) {
    origin[0] = '\0';
    if (!s->opt->allowed_origins || same_origin(s, wsi)) return 1;
    return lws_hdr_copy(wsi, origin, (int)cap, WSI_TOKEN_ORIGIN) > 0 &&
           apikeys_origin_listed(s->opt->allowed_origins, origin);
}

int server_authorized(server *s, struct lws *wsi, int *from_query) {
    *from_query = 0;
    if (!s->keys) return 1;
    char auth[APIKEYS_MAX_KEY + 64] = "", arg[APIKEYS_MAX_KEY + 8] = "";
    int has_auth = lws_hdr_copy(wsi, auth, sizeof auth, WSI_TOKEN_HTTP_AUTHORIZATION) > 0;
    const char *token = lws_get_urlarg_by_name(wsi, "token=", arg, sizeof arg); /* points into arg, past "token=" */
    /* The whole Cookie header, however long: a browser sends every cookie of the host (other
     * local apps' among them), and ours may come last. */
    int cookie_len = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_COOKIE);
    char *cookie = cookie_len > 0 ? malloc((size_t)cookie_len + 1) : NULL;
    int has_cookie = cookie && lws_hdr_copy(wsi, cookie, cookie_len + 1, WSI_TOKEN_HTTP_COOKIE) > 0;
    size_t len = 0;
    apikeys_source source;
    const char *key = apikeys_presented(has_auth ? auth : NULL, token, has_cookie ? cookie : NULL, &len, &source);
    *from_query = key && source == APIKEYS_FROM_QUERY;
    int ok = key && apikeys_check(s->keys, key, len);
    if (ok && source == APIKEYS_FROM_COOKIE && !same_origin(s, wsi)) {
        PP_WARN("server", "a key cookie on a request from another site's page refused (Origin is not this server)");
        ok = 0;
    }
    free(cookie);
    if (ok) return 1;
    metrics_unauthorized(s->metrics);
    return 0;
}
