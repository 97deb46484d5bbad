/* params: defaults, query decoding and bounds for one conversation's settings. */
#include "session/params.h"

#include "base/err.h"
#include "base/number.h"
#include "base/log.h"
#include "base/rng.h"
#include "io/voice.h"
#include "text/utf8.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REFERENCE_SEED 42424242u

void pp_params_defaults(pp_session_params *p) {
    memset(p, 0, sizeof *p);
    strcpy(p->voice, "NATF2");
    p->text_temperature = 0.7f;
    p->text_topk = 25;
    p->audio_temperature = 0.8f;
    p->audio_topk = 250;
    p->text_seed = p->audio_seed = REFERENCE_SEED;
    p->echo_cancel = -1;
}

_Static_assert(PP_PARAMS_MAX_VOICE >= PP_VOICE_NAME_MAX + sizeof ".embeddings.bin",
               "every voice the voices directory lists can be asked for, with its suffix");

int pp_params_set_voice(pp_session_params *p, const char *name, char *err) {
    size_t len = strlen(name);
    /* The name itself is checked where it is resolved (pp_voice_resolve refuses paths). */
    if (!len || len >= sizeof p->voice)
        return pp_fail(err, PP_EINVAL, "voice_prompt: the name must be 1 to %d bytes", (int)sizeof p->voice - 1);
    memcpy(p->voice, name, len + 1);
    return PP_OK;
}

/* Parses a float; returns 0 and logs when value is not a finite number. */
static int parse_float(const char *key, const char *value, double *out) {
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (!*value || *end || errno || !isfinite(v)) {
        PP_WARN("params", "%s: '%.32s' is not a number; keeping the default", key, value);
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_int(const char *key, const char *value, long long *out) {
    if (pp_parse_integer(value, out)) return 1;
    PP_WARN("params", "%s: '%.32s' is not an integer; keeping the default", key, value);
    return 0;
}

static void set_float(float *dst, const char *key, const char *value, double lo, double hi) {
    double v;
    if (!parse_float(key, value, &v)) return;
    if (v < lo || v > hi) {
        double c = v < lo ? lo : hi;
        PP_WARN("params", "%s=%g is outside [%g, %g]; using %g", key, v, lo, hi, c);
        v = c;
    }
    *dst = (float)v;
}

static void set_int(int *dst, const char *key, const char *value, long long lo, long long hi) {
    long long v;
    if (!parse_int(key, value, &v)) return;
    if (v < lo || v > hi) {
        long long c = v < lo ? lo : hi;
        PP_WARN("params", "%s=%lld is outside [%lld, %lld]; using %lld", key, v, lo, hi, c);
        v = c;
    }
    *dst = (int)v;
}

/* 1/0, true/false, on/off; anything else is logged and leaves *dst as it was. */
static void set_bool(int *dst, const char *key, const char *value) {
    static const char *const words[][2] = {{"0", "1"}, {"false", "true"}, {"off", "on"}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        for (int v = 0; v < 2; v++)
            if (strcmp(value, words[i][v]) == 0) {
                *dst = v;
                return;
            }
    PP_WARN("params", "%s=%.16s is not 1/0, true/false or on/off; ignored", key, value);
}

uint64_t pp_params_conversation_seed(uint64_t base, uint64_t conversation) {
    uint64_t state = base ^ (conversation * 0xd6e8feb86659fd93ull);
    return pp_splitmix64(&state);
}

/* Seeds are 64-bit unsigned, all of that range a client may pick; a negative one, -1 in the
 * reference ("do not reseed"), keeps the server's. */
static void set_seed(uint64_t *a, uint64_t *b, const char *key, const char *value) {
    if (strchr(value, '-')) { /* strtoull would wrap it */
        long long v;
        parse_int(key, value, &v); /* logs one that is not a number */
        return;
    }
    char *end;
    errno = 0;
    uint64_t u = strtoull(value, &end, 10);
    if (!*value || *end || errno) {
        PP_WARN("params", "%s: '%.32s' is not a seed (0 to 2^64 - 1); keeping the default", key, value);
        return;
    }
    *a = u;
    if (b) *b = u;
}

/* Keys clients send that this model does not use (docs/protocol.md §1.4). */
static const char *const g_ignored[] = {"pad_mult", "repetition_penalty", "repetition_penalty_context",
                                        "worker_auth_id", "email"};

int pp_params_set(pp_session_params *p, const char *key, const char *value, char *err) {
    size_t vlen = strlen(value);
    if (strcmp(key, "text_prompt") == 0) {
        if (vlen > PP_PARAMS_MAX_PROMPT)
            return pp_fail(err, PP_EFULL, "text_prompt is %zu bytes; the limit is %d", vlen, PP_PARAMS_MAX_PROMPT);
        if (!pp_utf8_valid(value, vlen)) return pp_fail(err, PP_EINVAL, "text_prompt is not valid UTF-8");
        /* Text, lines and tabs: other control characters mean nothing to the model, and a JSON
         * reply that repeats the prompt would take six bytes for each. */
        for (size_t i = 0; i < vlen; i++) {
            const unsigned char c = (unsigned char)value[i];
            if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
                return pp_fail(err, PP_EINVAL, "text_prompt holds the control character 0x%02x at byte %zu", c, i);
        }
        memcpy(p->text_prompt, value, vlen + 1);
    } else if (strcmp(key, "voice_prompt") == 0) {
        return pp_params_set_voice(p, value, err);
    } else if (strcmp(key, "text_temperature") == 0) {
        set_float(&p->text_temperature, key, value, 0.0, 2.0);
    } else if (strcmp(key, "audio_temperature") == 0) {
        set_float(&p->audio_temperature, key, value, 0.0, 2.0);
    } else if (strcmp(key, "text_topk") == 0) {
        set_int(&p->text_topk, key, value, 1, 32000);
    } else if (strcmp(key, "audio_topk") == 0) {
        set_int(&p->audio_topk, key, value, 1, 2048);
    } else if (strcmp(key, "seed") == 0) {
        set_seed(&p->text_seed, &p->audio_seed, key, value);
    } else if (strcmp(key, "text_seed") == 0) {
        set_seed(&p->text_seed, NULL, key, value);
    } else if (strcmp(key, "audio_seed") == 0) {
        set_seed(&p->audio_seed, NULL, key, value);
    } else if (strcmp(key, "echo_cancel") == 0) {
        set_bool(&p->echo_cancel, key, value);
    } else {
        for (size_t i = 0; i < sizeof g_ignored / sizeof g_ignored[0]; i++)
            if (strcmp(key, g_ignored[i]) == 0) {
                PP_DEBUG("params", "%s is not used by this model; ignored", key);
                return PP_OK;
            }
        PP_WARN("params", "unknown query parameter '%.32s' ignored", key);
    }
    return PP_OK;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Form-decodes src[0..n) into dst (NUL-terminated, at most n + 1 bytes). Returns 0, or -1 on
 * a bad %XX escape or an escaped NUL. */
static int form_decode(const char *src, size_t n, char *dst) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = src[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            if (i + 2 >= n) return -1;
            int hi = hex_value(src[i + 1]), lo = hex_value(src[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return -1;
            c = (char)(hi * 16 + lo);
            i += 2;
        } else if (c == '\0') {
            return -1;
        }
        dst[o++] = c;
    }
    dst[o] = '\0';
    return 0;
}

int pp_params_parse_query(pp_session_params *p, const char *query, size_t len, char *err) {
    char *buf = malloc(len + 2);
    if (!buf) return pp_fail(err, PP_ENOMEM, "query string: out of memory");
    int rc = PP_OK;
    size_t start = 0;
    while (start <= len && !rc) {
        size_t end = start;
        while (end < len && query[end] != '&') end++;
        const char *eq = memchr(query + start, '=', end - start);
        size_t klen = eq ? (size_t)(eq - (query + start)) : end - start;
        if (end > start) {
            /* Key and value are decoded into one buffer: key at 0, value after its NUL. */
            char *key = buf, *value = buf + klen + 1;
            value[0] = '\0';
            if (form_decode(query + start, klen, key) != 0) {
                PP_WARN("params", "query key with a malformed %%-escape skipped");
            } else if (eq && form_decode(eq + 1, end - start - klen - 1, value) != 0) {
                if (strcmp(key, "text_prompt") == 0 || strcmp(key, "voice_prompt") == 0)
                    rc = pp_fail(err, PP_EINVAL, "%s: malformed %%-escape", key);
                else
                    PP_WARN("params", "%.32s: malformed %%-escape; keeping the default", key);
            } else {
                rc = pp_params_set(p, key, value, err);
            }
        }
        start = end + 1;
    }
    free(buf);
    return rc;
}
