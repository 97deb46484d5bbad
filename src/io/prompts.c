#include "io/prompts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "io/file.h"

#define MAGIC 0x50506573u
#define MAX_FILE (64u << 20)
#define MAX_PROMPTS 4096

typedef struct prompt {
    char name[PP_PROMPT_NAME_MAX + 1];
    int32_t *ids;
    size_t n;
} prompt;

struct pp_prompts {
    prompt *items;
    size_t count;
};

static uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void pp_prompts_free(pp_prompts *p) {
    if (!p) return;
    for (size_t i = 0; i < p->count; i++) free(p->items[i].ids);
    free(p->items);
    free(p);
}

int pp_prompts_parse(const void *buf, size_t len, const char *label, pp_prompts **out, char *err) {
    *out = NULL;
    const uint8_t *p = buf, *end = p + len;
    if (len < 12) return pp_fail(err, PP_EFORMAT, "%s: %zu bytes, shorter than the header", label, len);
    if (u32_at(p) != MAGIC || u32_at(p + 4) != 1)
        return pp_fail(err, PP_EFORMAT, "%s: not a version-1 system prompts file (magic 0x%08x, version %u)", label,
                       u32_at(p), u32_at(p + 4));
    uint32_t count = u32_at(p + 8);
    if (count > MAX_PROMPTS) return pp_fail(err, PP_EFORMAT, "%s: %u prompts (at most %d)", label, count, MAX_PROMPTS);
    pp_prompts *ps = calloc(1, sizeof *ps);
    if (!ps || !(ps->items = calloc(count ? count : 1, sizeof *ps->items))) {
        free(ps);
        return pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
    }
    p += 12;
    int rc = 0;
    for (uint32_t i = 0; i < count && !rc; i++) {
        prompt *it = &ps->items[i];
        uint32_t nlen = (size_t)(end - p) >= 4 ? u32_at(p) : UINT32_MAX;
        if (nlen == UINT32_MAX || nlen > (size_t)(end - p) - 4) {
            rc = pp_fail(err, PP_EFORMAT, "%s: prompt %u: name runs past the end", label, i);
            break;
        }
        if (!nlen || nlen > PP_PROMPT_NAME_MAX || memchr(p + 4, 0, nlen)) {
            rc = pp_fail(err, PP_EFORMAT, "%s: prompt %u: name of %u bytes (1..%d, no NUL)", label, i, nlen,
                         PP_PROMPT_NAME_MAX);
            break;
        }
        memcpy(it->name, p + 4, nlen);
        p += 4 + nlen;
        uint32_t n = (size_t)(end - p) >= 4 ? u32_at(p) : UINT32_MAX;
        if (n == UINT32_MAX || n > ((size_t)(end - p) - 4) / 4) {
            rc = pp_fail(err, PP_EFORMAT, "%s: prompt '%s': token ids run past the end", label, it->name);
            break;
        }
        for (uint32_t k = 0; k < i; k++)
            if (!strcmp(ps->items[k].name, it->name))
                rc = pp_fail(err, PP_EFORMAT, "%s: prompt '%s' appears twice", label, it->name);
        it->n = n;
        if (!rc && !(it->ids = malloc((n ? n : 1) * sizeof *it->ids)))
            rc = pp_fail(err, PP_ENOMEM, "%s: out of memory", label);
        for (uint32_t k = 0; !rc && k < n; k++) {
            it->ids[k] = (int32_t)u32_at(p + 4 + 4 * k);
            if (it->ids[k] < 0)
                rc = pp_fail(err, PP_EFORMAT, "%s: prompt '%s': token %u is %d", label, it->name, k, it->ids[k]);
        }
        ps->count = i + 1;
        p += 4 + 4 * (size_t)n;
    }
    if (!rc && p != end) rc = pp_fail(err, PP_EFORMAT, "%s: %zu bytes after the last prompt", label, (size_t)(end - p));
    if (rc) {
        pp_prompts_free(ps);
        return rc;
    }
    *out = ps;
    return 0;
}

int pp_prompts_load(const char *path, pp_prompts **out, char *err) {
    unsigned char *buf;
    size_t len;
    *out = NULL;
    int rc = pp_file_read_all(path, MAX_FILE, &buf, &len, err);
    if (rc) return rc;
    rc = pp_prompts_parse(buf, len, path, out, err);
    free(buf);
    return rc;
}

size_t pp_prompts_count(const pp_prompts *p) { return p ? p->count : 0; }
const char *pp_prompts_name(const pp_prompts *p, size_t i) { return p && i < p->count ? p->items[i].name : NULL; }

int pp_prompts_find(const pp_prompts *p, const char *name, const int32_t **ids, size_t *n, char *err) {
    for (size_t i = 0; p && i < p->count; i++)
        if (!strcmp(p->items[i].name, name)) {
            *ids = p->items[i].ids, *n = p->items[i].n;
            return 0;
        }
    char have[512] = "";
    size_t used = 0;
    for (size_t i = 0; p && i < p->count && used < sizeof have - 1; i++)
        used += (size_t)snprintf(have + used, sizeof have - used, "%s%s", i ? ", " : "", p->items[i].name);
    return pp_fail(err, PP_ENOTFOUND, "no system prompt named '%.64s' (%s%s)", name, p ? "there are: " : "none loaded",
                   have);
}
