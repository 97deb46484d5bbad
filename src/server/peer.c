/* peer: socket peer or proxy-reported client address, for logs. */
#include "server/peer.h"

#include <libwebsockets.h>

#include <stdio.h>
#include <string.h>

/* Copies the IP-address characters of src[0..len) into out (NUL-terminated); 0 if none. */
static size_t keep_address(const char *src, size_t len, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap; i++) {
        char c = src[i];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '.' || c == ':')
            out[o++] = c;
    }
    out[o] = '\0';
    return o;
}

/* The proxy-reported client address, or 0 when the request carries none. */
static size_t forwarded_address(struct lws *wsi, char *out, size_t cap) {
    char h[512];
#if defined(LWS_WITH_HTTP_UNCOMMON_HEADERS) || defined(LWS_HTTP_HEADERS_ALL)
    if (lws_hdr_copy(wsi, h, sizeof h, WSI_TOKEN_HTTP_X_REAL_IP) > 0 && keep_address(h, strlen(h), out, cap))
        return strlen(out);
#endif
    if (lws_hdr_copy(wsi, h, sizeof h, WSI_TOKEN_X_FORWARDED_FOR) > 0) {
        const char *last = strrchr(h, ',');
        last = last ? last + 1 : h;
        return keep_address(last, strlen(last), out, cap);
    }
    return 0;
}

void peer_address(struct lws *wsi, int behind_proxy, char *out, size_t cap) {
    char sock[64], client[64];
    lws_get_peer_simple(wsi, sock, sizeof sock);
    if (behind_proxy && forwarded_address(wsi, client, sizeof client)) snprintf(out, cap, "%s via %s", client, sock);
    else snprintf(out, cap, "%s", sock);
}
