/* json: a strict RFC 8259 parser into a read-only tree, for safetensors headers,
 * config.json and the JSON events of /v1/realtime and /v1/twilio, and a writer of events. One allocation arena per
 * document; strings are NUL-terminated UTF-8 with escapes resolved. Depth and size limits keep hostile input bounded.
 */
#ifndef PP_BASE_JSON_H
#define PP_BASE_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { PP_JSON_NULL, PP_JSON_BOOL, PP_JSON_NUMBER, PP_JSON_STRING, PP_JSON_ARRAY, PP_JSON_OBJECT } pp_json_type;

typedef struct pp_json pp_json;
struct pp_json {
    pp_json_type type;
    int boolean;
    double number;        /* PP_JSON_NUMBER */
    int is_integer;       /* the literal had no fraction or exponent and fits in int64 */
    int64_t integer;      /* valid when is_integer */
    const char *string;   /* PP_JSON_STRING: value; NUL-terminated, may contain no NUL */
    size_t string_len;
    size_t count;         /* ARRAY/OBJECT: number of children */
    pp_json **items;      /* ARRAY/OBJECT: children in document order */
    const char **keys;    /* OBJECT: keys parallel to items */
};

typedef struct pp_json_doc pp_json_doc;

/* Parses len bytes (not necessarily NUL-terminated). Trailing whitespace is allowed,
 * anything else after the value is an error. On error, err says what and at which byte.
 * Duplicate object keys are kept (callers that must refuse them use pp_json_has_dup_keys). */
int pp_json_parse(const char *text, size_t len, pp_json_doc **out, char *err);
/* pp_json_parse of a document of at most max_values values (every scalar, array and object
 * counts): what a peer sends, whose cost must not grow with how finely it splits its bytes. */
int pp_json_parse_bounded(const char *text, size_t len, size_t max_values, pp_json_doc **out, char *err);
const pp_json *pp_json_root(const pp_json_doc *doc);
void pp_json_free(pp_json_doc *doc);

/* Object member by key, or NULL (also NULL when obj is not an object). First match wins. */
const pp_json *pp_json_get(const pp_json *obj, const char *key);
/* Returns a key that appears more than once in obj, or NULL. */
const char *pp_json_dup_key(const pp_json *obj);

/* A writer of JSON text into a fixed buffer (the server's JSON events). Appends stop at the
 * first that does not fit; pp_jw_end then fails. */
typedef struct pp_jw {
    char *buf;
    size_t cap, len;
    int overflow;
} pp_jw;

void pp_jw_init(pp_jw *w, char *buf, size_t cap);
/* Appends text as it is (punctuation, keys, numbers), formatted as printf does. */
void pp_jw_raw(pp_jw *w, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Appends len bytes of UTF-8 as a quoted JSON string (quote, backslash and control characters
 * escaped; each ill-formed byte, a sequence cut short among them, as \ufffd; the rest copied). */
void pp_jw_str(pp_jw *w, const char *s, size_t len);
/* NUL-terminates; returns the length, or -1 when something did not fit. */
long pp_jw_end(pp_jw *w);

#endif
