/* protobuf: a strict reader of the protocol-buffer wire format, for ONNX files (io/onnx.h).
 *
 * A cursor walks the fields of one message in the caller's buffer: pp_pb_next returns each
 * field's number, wire type and value (an integer, or a byte span for length-delimited
 * fields, which the caller opens as a sub-message when the schema says so). Nothing is copied,
 * so a tensor's raw bytes stay where the mapped file holds them. Every length is checked
 * against the bytes left; groups (wire types 3 and 4, deprecated) and varints over ten bytes
 * are errors. Unknown fields are the caller's to skip, as protobuf's own readers do. */
#ifndef PP_IO_PROTOBUF_H
#define PP_IO_PROTOBUF_H

#include <stddef.h>
#include <stdint.h>

enum { PP_PB_VARINT = 0, PP_PB_FIXED64 = 1, PP_PB_BYTES = 2, PP_PB_FIXED32 = 5 };

typedef struct pp_pb {
    const uint8_t *p, *end;
} pp_pb;

typedef struct pp_pb_field {
    uint32_t number;
    int wire;
    uint64_t u;           /* VARINT, FIXED64, FIXED32 */
    const uint8_t *bytes; /* BYTES */
    size_t len;
} pp_pb_field;

static inline pp_pb pp_pb_open(const void *buf, size_t len) {
    return (pp_pb){(const uint8_t *)buf, (const uint8_t *)buf + len};
}
/* 1: *f holds the next field; 0: the message ended; PP_EFORMAT (err names what) on bad bytes. */
int pp_pb_next(pp_pb *c, pp_pb_field *f, const char *what, char *err);
/* Reads one varint of a packed repeated field. 1: read, 0: span ended, PP_EFORMAT: bad bytes. */
int pp_pb_varint(pp_pb *c, uint64_t *v);

#endif
