/* base64: RFC 4648 §4 (standard alphabet, '=' padding), for the JSON audio of /v1/realtime
 * and /v1/twilio. Decoding is strict: no whitespace, no other alphabet, padding only at the
 * end and only where the length needs it. */
#ifndef PP_BASE_BASE64_H
#define PP_BASE_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Characters pp_base64_encode writes for n bytes (no NUL counted). */
#define PP_BASE64_LEN(n) (((n) + 2) / 3 * 4)

/* Writes PP_BASE64_LEN(n) characters and a NUL into out (cap >= that + 1). Returns the length,
 * or -1 when cap is too small. */
long pp_base64_encode(const uint8_t *data, size_t n, char *out, size_t cap);
/* Decodes len characters into out (cap bytes). Returns the byte count, or -1 when the text is
 * not base64 or the result does not fit. */
long pp_base64_decode(const char *text, size_t len, uint8_t *out, size_t cap);

#endif
