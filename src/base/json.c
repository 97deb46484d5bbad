/* json: see json.h. A recursive-descent parser over a byte span. Nodes, strings and child
 * tables live in one bump arena per document; while a container is being parsed its
 * children sit on a shared growable stack and are copied into the arena once counted. */
#include "base/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define JSON_MAX_DEPTH 64
/* Far above any safetensors header (100 MB) or config; keeps offsets and arena sizes sane. */
#define JSON_MAX_LEN ((size_t)1 << 30)
#define ARENA_BLOCK (64 * 1024)

/* ---- arena -------------------------------------------------------------------------------- */

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} arena_block;

struct pp_json_doc {
    arena_block *blocks;
    pp_json *root;
};

static void *arena_alloc(pp_json_doc *doc, size_t n) {
    n = (n + 15) & ~(size_t)15;
    arena_block *b = doc->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = malloc(sizeof(*b) + cap);
        if (!b) return NULL;
        b->next = doc->blocks;
        b->used = 0;
        b->cap = cap;
        doc->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

/* ---- parser state ------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *s;
    size_t len, pos;
    pp_json_doc *doc;
    char *err;
    /* pending children of the containers being parsed (keys NULL inside arrays) */
    pp_json **stack_items;
    const char **stack_keys;
    size_t stack_len, stack_cap;
    size_t values_left; /* pp_json_parse_bounded's limit, counted down */
} parser;

static int fail_at(parser *p, size_t at, const char *what) {
    return pp_fail(p->err, PP_EFORMAT, "json: %s at byte %zu", what, at);
}

static int oom(parser *p) {
    return pp_fail(p->err, PP_ENOMEM, "json: out of memory at byte %zu", p->pos);
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int push_child(parser *p, const char *key, pp_json *item) {
    if (p->stack_len == p->stack_cap) {
        size_t cap = p->stack_cap ? p->stack_cap * 2 : 64;
        pp_json **items = realloc(p->stack_items, cap * sizeof(*items));
        if (!items) return oom(p);
        p->stack_items = items;
        const char **keys = realloc(p->stack_keys, cap * sizeof(*keys));
        if (!keys) return oom(p);
        p->stack_keys = keys;
        p->stack_cap = cap;
    }
    p->stack_items[p->stack_len] = item;
    p->stack_keys[p->stack_len] = key;
    p->stack_len++;
    return 0;
}

/* Moves the children pushed since `base` into arena tables of node v. */
static int pop_children(parser *p, size_t base, pp_json *v, int with_keys) {
    size_t n = p->stack_len - base;
    v->count = n;
    if (n) {
        v->items = arena_alloc(p->doc, n * sizeof(*v->items));
        if (!v->items) return oom(p);
        memcpy(v->items, p->stack_items + base, n * sizeof(*v->items));
        if (with_keys) {
            v->keys = arena_alloc(p->doc, n * sizeof(*v->keys));
            if (!v->keys) return oom(p);
            memcpy(v->keys, p->stack_keys + base, n * sizeof(*v->keys));
        }
    }
    p->stack_len = base;
    return 0;
}

/* ---- strings ------------------------------------------------------------------------------ */

static int hex4(const unsigned char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = s[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(unsigned char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the well-formed UTF-8 sequence at s (at most avail bytes), or 0 when it is
 * invalid: overlong forms, surrogates and code points above U+10FFFF are refused. */
static size_t utf8_seq_len(const unsigned char *s, size_t avail) {
    unsigned c = s[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (avail < n || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return n;
}

/* Decodes a \u escape (and its low-surrogate partner) at p->pos (just after the 'u'). */
static int parse_u_escape(parser *p, unsigned *cp) {
    size_t at = p->pos - 2;
    unsigned hiv, lov;
    if (p->len - p->pos < 4 || hex4(p->s + p->pos, &hiv)) return fail_at(p, at, "bad \\u escape");
    p->pos += 4;
    if (hiv >= 0xDC00 && hiv <= 0xDFFF) return fail_at(p, at, "lone low surrogate");
    if (hiv >= 0xD800 && hiv <= 0xDBFF) {
        if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
            hex4(p->s + p->pos + 2, &lov) || lov < 0xDC00 || lov > 0xDFFF)
            return fail_at(p, at, "high surrogate without a low surrogate");
        p->pos += 6;
        hiv = 0x10000 + ((hiv - 0xD800) << 10) + (lov - 0xDC00);
    }
    if (hiv == 0) return fail_at(p, at, "\\u0000 in a string is not supported");
    *cp = hiv;
    return 0;
}

/* Parses the string starting at the opening quote into arena memory. */
static int parse_string(parser *p, const char **out, size_t *out_len) {
    size_t start = ++p->pos, end = start;
    /* find the closing quote first: the decoded text is never longer than the raw span */
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return fail_at(p, start - 1, "unterminated string");
    unsigned char *o = arena_alloc(p->doc, end - start + 1);
    if (!o) return oom(p);
    size_t n = 0;
    while (p->pos < end) {
        unsigned char c = p->s[p->pos];
        if (c < 0x20) return fail_at(p, p->pos, "control character in string");
        if (c == '\\') {
            unsigned char e = p->s[p->pos + 1];
            unsigned cp = 0;
            p->pos += 2;
            switch (e) {
            case '"': o[n++] = '"'; break;
            case '\\': o[n++] = '\\'; break;
            case '/': o[n++] = '/'; break;
            case 'b': o[n++] = '\b'; break;
            case 'f': o[n++] = '\f'; break;
            case 'n': o[n++] = '\n'; break;
            case 'r': o[n++] = '\r'; break;
            case 't': o[n++] = '\t'; break;
            case 'u': {
                int rc = parse_u_escape(p, &cp);
                if (rc) return rc; /* s[end] is '"', so no escape can read across it */
                n += put_utf8(o + n, cp);
                break;
            }
            default: return fail_at(p, p->pos - 2, "bad escape");
            }
            continue;
        }
        size_t k = utf8_seq_len(p->s + p->pos, end - p->pos);
        if (!k) return fail_at(p, p->pos, "invalid UTF-8");
        memcpy(o + n, p->s + p->pos, k);
        n += k;
        p->pos += k;
    }
    o[n] = 0;
    p->pos = end + 1;
    *out = (const char *)o;
    *out_len = n;
    return 0;
}

/* ---- numbers ------------------------------------------------------------------------------ */

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static int parse_number(parser *p, pp_json *v) {
    size_t start = p->pos, i = p->pos;
    int neg = 0, integral = 1;
    if (i < p->len && p->s[i] == '-') neg = 1, i++;
    if (i >= p->len || !is_digit(p->s[i])) return fail_at(p, start, "bad number");
    if (p->s[i] == '0' && i + 1 < p->len && is_digit(p->s[i + 1]))
        return fail_at(p, start, "leading zero in number");
    size_t int_start = i;
    while (i < p->len && is_digit(p->s[i])) i++;
    size_t int_end = i;
    if (i < p->len && p->s[i] == '.') {
        integral = 0;
        if (++i >= p->len || !is_digit(p->s[i])) return fail_at(p, start, "bad fraction in number");
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        integral = 0;
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (i >= p->len || !is_digit(p->s[i])) return fail_at(p, start, "bad exponent in number");
        while (i < p->len && is_digit(p->s[i])) i++;
    }
    /* strtod needs a terminated copy; the grammar above already fixed the exact span */
    char small[64], *txt = small;
    size_t n = i - start;
    if (n >= sizeof(small)) {
        txt = arena_alloc(p->doc, n + 1);
        if (!txt) return oom(p);
    }
    memcpy(txt, p->s + start, n);
    txt[n] = 0;
    v->type = PP_JSON_NUMBER;
    v->number = strtod(txt, NULL);
    if (isinf(v->number)) return fail_at(p, start, "number out of range");
    if (integral) {
        /* accumulate as a negative value so INT64_MIN is representable */
        int64_t acc = 0;
        int fits = 1;
        for (size_t k = int_start; k < int_end && fits; k++) {
            int d = p->s[k] - '0';
            if (acc < (INT64_MIN + d) / 10) fits = 0;
            else acc = acc * 10 - d;
        }
        if (fits && !neg && acc == INT64_MIN) fits = 0;
        if (fits) {
            v->is_integer = 1;
            v->integer = neg ? acc : -acc;
        }
    }
    p->pos = i;
    return 0;
}

/* ---- values ------------------------------------------------------------------------------- */

static int parse_value(parser *p, pp_json **out, int depth);

static int expect_literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n)) return fail_at(p, p->pos, "unexpected token");
    p->pos += n;
    return 0;
}

static int parse_container(parser *p, pp_json *v, int depth) {
    int is_obj = p->s[p->pos] == '{';
    char close = is_obj ? '}' : ']';
    size_t base = p->stack_len;
    int rc;
    if (depth > JSON_MAX_DEPTH) return fail_at(p, p->pos, "nesting deeper than 64");
    v->type = is_obj ? PP_JSON_OBJECT : PP_JSON_ARRAY;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        pp_json *child;
        skip_ws(p);
        if (is_obj) {
            size_t key_len;
            if (p->pos >= p->len || p->s[p->pos] != '"') return fail_at(p, p->pos, "expected a string key");
            if ((rc = parse_string(p, &key, &key_len))) return rc;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return fail_at(p, p->pos, "expected ':'");
            p->pos++;
        }
        if ((rc = parse_value(p, &child, depth)) || (rc = push_child(p, key, child))) return rc;
        skip_ws(p);
        if (p->pos >= p->len) return fail_at(p, p->pos, "unexpected end of input");
        if (p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->s[p->pos] != close) return fail_at(p, p->pos, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        p->pos++;
        return pop_children(p, base, v, is_obj);
    }
}

static int parse_value(parser *p, pp_json **out, int depth) {
    skip_ws(p);
    if (p->pos >= p->len) return fail_at(p, p->pos, "unexpected end of input");
    if (!p->values_left--) return fail_at(p, p->pos, "more values than the document may hold");
    pp_json *v = arena_alloc(p->doc, sizeof(*v));
    if (!v) return oom(p);
    memset(v, 0, sizeof(*v));
    *out = v;
    switch (p->s[p->pos]) {
    case '{':
    case '[': return parse_container(p, v, depth + 1);
    case '"': v->type = PP_JSON_STRING; return parse_string(p, &v->string, &v->string_len);
    case 't': v->type = PP_JSON_BOOL; v->boolean = 1; return expect_literal(p, "true");
    case 'f': v->type = PP_JSON_BOOL; return expect_literal(p, "false");
    case 'n': v->type = PP_JSON_NULL; return expect_literal(p, "null");
    default:
        if (p->s[p->pos] != '-' && !is_digit(p->s[p->pos])) return fail_at(p, p->pos, "unexpected character");
        return parse_number(p, v);
    }
}

/* ---- public API --------------------------------------------------------------------------- */

int pp_json_parse(const char *text, size_t len, pp_json_doc **out, char *err) {
    return pp_json_parse_bounded(text, len, SIZE_MAX, out, err);
}

int pp_json_parse_bounded(const char *text, size_t len, size_t max_values, pp_json_doc **out, char *err) {
    *out = NULL;
    if (!text && len) return pp_fail(err, PP_EINVAL, "json: NULL text");
    if (len > JSON_MAX_LEN) return pp_fail(err, PP_EFORMAT, "json: document of %zu bytes is too large", len);
    pp_json_doc *doc = calloc(1, sizeof(*doc));
    if (!doc) return pp_fail(err, PP_ENOMEM, "json: out of memory");
    parser p = {.s = (const unsigned char *)text, .len = len, .doc = doc, .err = err, .values_left = max_values};
    int rc = parse_value(&p, &doc->root, 0);
    if (!rc) {
        skip_ws(&p);
        if (p.pos != p.len) rc = fail_at(&p, p.pos, "trailing characters after the value");
    }
    free(p.stack_items);
    free(p.stack_keys);
    if (rc) {
        pp_json_free(doc);
        return rc;
    }
    *out = doc;
    return 0;
}

const pp_json *pp_json_root(const pp_json_doc *doc) { return doc ? doc->root : NULL; }

void pp_json_free(pp_json_doc *doc) {
    if (!doc) return;
    for (arena_block *b = doc->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(doc);
}

const pp_json *pp_json_get(const pp_json *obj, const char *key) {
    if (!obj || obj->type != PP_JSON_OBJECT || !key) return NULL;
    for (size_t i = 0; i < obj->count; i++)
        if (!strcmp(obj->keys[i], key)) return obj->items[i];
    return NULL;
}

static int cmp_key_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *pp_json_dup_key(const pp_json *obj) {
    if (!obj || obj->type != PP_JSON_OBJECT || obj->count < 2) return NULL;
    /* Sorting a copy is O(n log n) for headers with thousands of tensors; without memory,
     * fall back to the quadratic scan rather than report "no duplicates" falsely. */
    const char **sorted = malloc(obj->count * sizeof(*sorted));
    if (!sorted) {
        for (size_t i = 0; i < obj->count; i++)
            for (size_t j = i + 1; j < obj->count; j++)
                if (!strcmp(obj->keys[i], obj->keys[j])) return obj->keys[i];
        return NULL;
    }
    memcpy(sorted, obj->keys, obj->count * sizeof(*sorted));
    qsort(sorted, obj->count, sizeof(*sorted), cmp_key_ptr);
    const char *dup = NULL;
    for (size_t i = 1; i < obj->count && !dup; i++)
        if (!strcmp(sorted[i - 1], sorted[i])) dup = sorted[i];
    free(sorted);
    return dup;
}

void pp_jw_init(pp_jw *w, char *buf, size_t cap) {
    w->buf = buf;
    w->cap = cap;
    w->len = 0;
    w->overflow = cap == 0;
}

void pp_jw_raw(pp_jw *w, const char *fmt, ...) {
    if (w->overflow) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->buf + w->len, w->cap - w->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= w->cap - w->len)
        w->overflow = 1;
    else
        w->len += (size_t)n;
}

static void jw_byte(pp_jw *w, char c) {
    if (w->overflow || w->len + 1 >= w->cap)
        w->overflow = 1;
    else
        w->buf[w->len++] = c;
}

void pp_jw_str(pp_jw *w, const char *s, size_t len) {
    jw_byte(w, '"');
    for (size_t i = 0; i < len && !w->overflow; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            jw_byte(w, '\\');
            jw_byte(w, (char)c);
        } else if (c == '\n' || c == '\t' || c == '\r' || c == '\b' || c == '\f') { /* the two-byte escapes */
            jw_byte(w, '\\');
            jw_byte(w, c == '\n' ? 'n' : c == '\t' ? 't' : c == '\r' ? 'r' : c == '\b' ? 'b' : 'f');
        } else if (c < 0x20 || c == 0x7f) {
            pp_jw_raw(w, "\\u%04x", c);
        } else if (c < 0x80) {
            jw_byte(w, (char)c);
        } else {
            /* Text frames must hold UTF-8 (RFC 6455 §8.1): a sequence cut by a caller's
             * truncation, or never valid, becomes U+FFFD rather than fail the client's socket. */
            size_t k = utf8_seq_len((const unsigned char *)s + i, len - i);
            if (!k) pp_jw_raw(w, "\\ufffd");
            for (size_t j = 0; j < k; j++) jw_byte(w, s[i + j]);
            i += k ? k - 1 : 0;
        }
    }
    jw_byte(w, '"');
}

long pp_jw_end(pp_jw *w) {
    if (w->overflow) return -1;
    w->buf[w->len] = '\0';
    return (long)w->len;
}
