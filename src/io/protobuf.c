#include "io/protobuf.h"

#include "base/err.h"

int pp_pb_varint(pp_pb *c, uint64_t *v) {
    if (c->p >= c->end) return 0;
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (c->p >= c->end) return PP_EFORMAT;
        uint8_t b = *c->p++;
        if (shift == 63 && b > 1) return PP_EFORMAT; /* more than 64 bits */
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 1;
        }
    }
    return PP_EFORMAT;
}

int pp_pb_next(pp_pb *c, pp_pb_field *f, const char *what, char *err) {
    uint64_t tag;
    int rc = pp_pb_varint(c, &tag);
    if (rc <= 0) return rc ? pp_fail(err, PP_EFORMAT, "%s: truncated or overlong field tag", what) : 0;
    f->number = (uint32_t)(tag >> 3);
    f->wire = (int)(tag & 7);
    if (!f->number || tag >> 32)
        return pp_fail(err, PP_EFORMAT, "%s: invalid field number %llu", what, (unsigned long long)(tag >> 3));
    size_t left;
    switch (f->wire) {
    case PP_PB_VARINT:
        if (pp_pb_varint(c, &f->u) != 1)
            return pp_fail(err, PP_EFORMAT, "%s: field %u: truncated or overlong varint", what, f->number);
        return 1;
    case PP_PB_FIXED64:
    case PP_PB_FIXED32: {
        size_t n = f->wire == PP_PB_FIXED64 ? 8 : 4;
        if ((size_t)(c->end - c->p) < n)
            return pp_fail(err, PP_EFORMAT, "%s: field %u: truncated fixed-size value", what, f->number);
        f->u = 0;
        for (size_t i = 0; i < n; i++) f->u |= (uint64_t)c->p[i] << (8 * i);
        c->p += n;
        return 1;
    }
    case PP_PB_BYTES:
        if (pp_pb_varint(c, &f->u) != 1)
            return pp_fail(err, PP_EFORMAT, "%s: field %u: truncated length", what, f->number);
        left = (size_t)(c->end - c->p);
        if (f->u > left)
            return pp_fail(err, PP_EFORMAT, "%s: field %u: length %llu past the %zu bytes left", what, f->number,
                           (unsigned long long)f->u, left);
        f->bytes = c->p;
        f->len = (size_t)f->u;
        c->p += f->len;
        return 1;
    default: return pp_fail(err, PP_EFORMAT, "%s: field %u: unsupported wire type %d", what, f->number, f->wire);
    }
}
