/* base64: encode and strict decode (see base64.h). */
#include "base/base64.h"

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

long pp_base64_encode(const uint8_t *data, size_t n, char *out, size_t cap) {
    size_t need = PP_BASE64_LEN(n);
    if (cap < need + 1) return -1;
    char *o = out;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        if (i + 1 < n) v |= (uint32_t)data[i + 1] << 8;
        if (i + 2 < n) v |= data[i + 2];
        *o++ = ALPHABET[v >> 18];
        *o++ = ALPHABET[(v >> 12) & 63];
        *o++ = i + 1 < n ? ALPHABET[(v >> 6) & 63] : '=';
        *o++ = i + 2 < n ? ALPHABET[v & 63] : '=';
    }
    *o = '\0';
    return (long)need;
}

static int sextet(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

long pp_base64_decode(const char *text, size_t len, uint8_t *out, size_t cap) {
    if (len % 4) return -1;
    size_t pad = len && text[len - 1] == '=' ? (text[len - 2] == '=' ? 2 : 1) : 0;
    size_t n = len / 4 * 3 - pad;
    if (n > cap) return -1;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int last = i + 4 == len;
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            int s = sextet(text[i + k]);
            if (s < 0) {
                /* '=' only as the padding of the last quantum */
                if (!(last && text[i + k] == '=' && (size_t)k >= 4 - pad)) return -1;
                s = 0;
            }
            v = v << 6 | (uint32_t)s;
        }
        out[o++] = (uint8_t)(v >> 16);
        if (o < n) out[o++] = (uint8_t)(v >> 8);
        if (o < n) out[o++] = (uint8_t)v;
    }
    return (long)n;
}
