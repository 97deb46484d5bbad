/* utf8: see utf8.h. */
#include "text/utf8.h"

#include <string.h>

int pp_utf8_valid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int n;
        unsigned cp, min;
        if ((c & 0xe0) == 0xc0) n = 1, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0) n = 2, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0) n = 3, cp = c & 0x07, min = 0x10000;
        else return 0;
        if (i + (size_t)n >= len) return 0; /* truncated sequence */
        for (int k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += (size_t)n + 1;
    }
    return 1;
}

/* Byte i of carry + in. */
static unsigned char joined_byte(const pp_utf8_carry *carry, const char *in, size_t i) {
    return i < carry->len ? carry->bytes[i] : (unsigned char)in[i - carry->len];
}

size_t pp_utf8_join(pp_utf8_carry *carry, const char *in, size_t len, char *out) {
    const size_t n = carry->len + len;
    size_t o = 0, i = 0;
    unsigned char seq[4], rest[4];
    size_t rest_len = 0;
    while (i < n) {
        unsigned char b = joined_byte(carry, in, i);
        size_t need = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
        size_t have = need && i + need > n ? n - i : need;
        for (size_t k = 0; k < have; k++) seq[k] = joined_byte(carry, in, i + k);
        if (have < need) { /* cut at the end: kept while what is there may still complete it */
            int prefix_ok = 1;
            for (size_t k = 1; k < have; k++) prefix_ok &= (seq[k] & 0xC0) == 0x80;
            if (prefix_ok) {
                memcpy(rest, seq, have);
                rest_len = have;
                break;
            }
            need = 0;
        }
        if (need && pp_utf8_valid((const char *)seq, need)) {
            memcpy(out + o, seq, need);
            o += need;
            i += need;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3); /* U+FFFD */
            o += 3;
            i++;
        }
    }
    memcpy(carry->bytes, rest, rest_len);
    carry->len = rest_len;
    return o;
}
