/* utf8: text that arrives in pieces which may cut a character (the LM's byte-fallback tokens
 * spell a character the vocabulary lacks one byte per frame), joined so that every piece handed
 * on holds whole characters only. */
#ifndef PP_TEXT_UTF8_H
#define PP_TEXT_UTF8_H

#include <stddef.h>

/* True when the len bytes at s are well-formed UTF-8 (no overlongs, surrogates or > U+10FFFF). */
int pp_utf8_valid(const char *s, size_t len);

/* The start of a character cut at the end of the previous piece; zero-initialised: empty. */
typedef struct pp_utf8_carry {
    unsigned char bytes[4];
    size_t len;
} pp_utf8_carry;

/* Writes to out the whole characters of carry + the len bytes at in and returns how many bytes
 * it wrote (no NUL). A character cut at the end, if what is there of it may still become valid,
 * stays in carry for the next piece; every malformed byte becomes U+FFFD. out must hold
 * PP_UTF8_JOIN_MAX(len) bytes. */
#define PP_UTF8_JOIN_MAX(len) (3 * (4 + (len)))
size_t pp_utf8_join(pp_utf8_carry *carry, const char *in, size_t len, char *out);

#endif
