/* capacity: the start-up memory estimate and the device report. */
#include "server/capacity.h"

#include "base/err.h"
#include "base/hostmem.h"
#include "base/log.h"
#include "io/onnx_bundle.h"
#include "io/onnx_mimi.h"
#include "io/quant_tensor.h"
#include "model/lm.h"
#include "model/lm_config.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GIB(x) ((double)(x) / (double)(1ull << 30))

typedef struct capacity_plan {
    uint64_t weights;      /* bytes of the checkpoint and the Mimi file */
    uint64_t per_session;  /* KV rings + CAPACITY_SESSION_EXTRA */
    uint64_t available;    /* free device memory (or MemAvailable) */
    int fit;               /* conversations that fit beside the weights (0: not even one) */
} capacity_plan;

size_t capacity_prompt_cache(int mb, uint64_t available) {
    size_t asked = (size_t)mb << 20, quarter = (size_t)(available / 4) & ~(((size_t)1 << 20) - 1);
    return asked < quarter ? asked : quarter;
}

uint64_t capacity_fixed_extra(uint64_t weights) {
    return weights < CAPACITY_FIXED_EXTRA ? weights : CAPACITY_FIXED_EXTRA;
}

int capacity_sessions_fit(uint64_t available, uint64_t weights, uint64_t per_session) {
    uint64_t base = weights + capacity_fixed_extra(weights);
    if (available <= base || !per_session) return 0;
    uint64_t n = (available - base) / per_session;
    return n > 100000 ? 100000 : (int)n;
}

int capacity_kv_bytes(const char *weights, pp_kv_format kv, uint64_t *out, int *context, char *err) {
    pp_lm_config c;
    pp_lm_config_default(&c);
    char buf[4200];
    const char *cfg = pp_lm_config_beside(weights, buf, sizeof buf);
    int have_config = cfg != NULL;
    if (have_config) {
        int rc = pp_lm_config_load(cfg, &c, err);
        if (rc) return rc;
    }
    st_file *f;
    /* the layer count of a GGUF file (24 in sts-web's); a bundle is not opened (that converts it) */
    if (!pp_onnx_bundle_is(weights) && !pp_st_open(weights, &f, NULL)) {
        pp_lm_config_fit_file(&c, f, have_config);
        pp_st_close(f);
    }
    /* the temporal transformer's rings; the depformer's hold dep_q steps and are tiny */
    *out = pp_lm_ctx_bytes(&c, kv);
    *context = c.context;
    return PP_OK;
}

static uint64_t file_size(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* The codec's bytes: its file, or a bundle's two codec graphs with their data files. */
static uint64_t codec_bytes(const char *mimi) {
    char dir[4096], path[4200];
    if (!mimi || !pp_onnx_mimi_is(mimi, dir, sizeof dir)) return file_size(mimi);
    static const char *const parts[] = {PP_ONNX_MIMI_ENCODER, PP_ONNX_MIMI_ENCODER ".data", PP_ONNX_MIMI_DECODER,
                                        PP_ONNX_MIMI_DECODER ".data"};
    uint64_t n = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, parts[i]);
        n += file_size(path);
    }
    return n;
}

/* Names the device and fills its total and free memory; *shared says the device's memory is
 * the host's (an integrated GPU: Jetson). A backend without device memory runs on the host. */
static void describe_device(pp_backend *be, char *name, size_t cap, uint64_t *total, uint64_t *avail, int *shared) {
    *total = *avail = 0;
    *shared = 0;
    if (be->ops->mem_info) {
        snprintf(name, cap, "%s device", be->ops->name);
        if (be->ops->describe) be->ops->describe(be, name, cap, shared);
        size_t w, b, ws, f = 0, t = 0, in_place;
        be->ops->mem_info(be, &w, &b, &ws, &f, &t, &in_place);
        *total = t, *avail = f;
        return;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(name, cap, "CPU, %ld cores", cores);
    pp_host_memory(total, avail);
}

/* Bytes the checkpoint's weights take once loaded: as stored, or quantized where q covers them. */
static uint64_t loaded_bytes(const st_file *f, const pp_lm_quantize *q) {
    if (!q) return pp_st_size(f);
    uint64_t bytes = 0;
    int group = q->group ? q->group : pp_quantize_default_group(q->fmt);
    for (size_t i = 0; i < pp_st_count(f); i++) {
        const st_tensor *t = pp_st_at(f, i);
        bytes += pp_lm_quantizes(q, t->name, t->ndim) ? pp_quantized_bytes(q->fmt, group, t->shape[0], t->shape[1])
                                                      : t->nbytes;
    }
    return bytes;
}

int capacity_check(pp_backend *be, const char *weights, const char *mimi, pp_kv_format kv, int max_sessions,
                   int enforce, char *err) {
    return capacity_check_quantized(be, weights, mimi, NULL, kv, max_sessions, enforce, err);
}

int capacity_check_quantized(pp_backend *be, const char *weights, const char *mimi, const pp_lm_quantize *quantize,
                             pp_kv_format kv, int max_sessions, int enforce, char *err) {
    char dev[256];
    capacity_plan p = {0};
    uint64_t total, kv_bytes;
    int context;
    int shared;
    describe_device(be, dev, sizeof dev, &total, &p.available, &shared);
    int rc = capacity_kv_bytes(weights, kv, &kv_bytes, &context, err);
    if (rc) return rc;
    st_file *f;
    p.weights = codec_bytes(mimi);
    size_t bundle_bytes;
    if (pp_onnx_bundle_is(weights)) { /* sized from its graphs: opening it would convert every weight */
        if (!pp_onnx_bundle_size(weights, &bundle_bytes, NULL)) p.weights += bundle_bytes;
    } else if (!pp_st_open(weights, &f, NULL)) { /* a GGUF file's shards count together */
        p.weights += loaded_bytes(f, quantize);
        pp_st_close(f);
    }
    p.per_session = kv_bytes + CAPACITY_SESSION_EXTRA;
    const char *what = be->ops->mem_info ? "free" : "RAM available";
    if (!total) {
        PP_WARN("capacity", "%s: memory size unknown; not checking that the model fits", dev);
        return PP_OK;
    }
    if (shared) {
        /* One DRAM for both: the weights are read in place from the file's pages (held once, as
         * counted below), and what the OS and other programs need is set aside up front rather
         * than guessed from what happens to be free (page cache, the file's own pages). */
        p.available = total > CAPACITY_OS_RESERVE ? total - CAPACITY_OS_RESERVE : 0;
        what = "for the model (unified memory, counted once)";
        PP_INFO("capacity", "%s: %.1f GiB shared by CPU and GPU, %.1f GiB kept for the OS", dev, GIB(total),
                GIB(CAPACITY_OS_RESERVE));
    }
    PP_INFO("capacity", "%s: %.1f GiB total, %.1f GiB %s", dev, GIB(total), GIB(p.available), what);
    p.fit = capacity_sessions_fit(p.available, p.weights, p.per_session);
    uint64_t need = p.weights + capacity_fixed_extra(p.weights) + (uint64_t)max_sessions * p.per_session;
    const char *base = strrchr(weights, '/');
    PP_INFO("capacity",
            "need about %.2f GiB: %s and Mimi %.2f GiB + %d x %.2f GiB per conversation (%s KV cache of %d "
            "steps %.2f GiB) + %.2f GiB workspace; %s (%d conversation%s would fit)",
            GIB(need), base ? base + 1 : weights, GIB(p.weights), max_sessions, GIB(p.per_session),
            pp_kv_format_name(kv), context, GIB(kv_bytes), GIB(capacity_fixed_extra(p.weights)),
            p.fit >= max_sessions ? "fits" : "DOES NOT FIT", p.fit, p.fit == 1 ? "" : "s");
    if (p.fit >= max_sessions) return PP_OK;
    if (!enforce) {
        PP_WARN("capacity", "starting anyway (--skip-memory-check)");
        return PP_OK;
    }
    if (p.fit > 0)
        return pp_fail(err, PP_EFULL,
                       "%d conversations need about %.2f GiB but %s has %.2f GiB %s: use --max-sessions %d, a "
                       "smaller weight format, or --skip-memory-check",
                       max_sessions, GIB(need), dev, GIB(p.available), what, p.fit);
    return pp_fail(err, PP_EFULL,
                   "the model does not fit: weights %.2f GiB plus one conversation %.2f GiB, but %s has %.2f GiB "
                   "%s; use a smaller weight format (model-turbo2bit is 2.07 GB) or --skip-memory-check",
                   GIB(p.weights), GIB(p.per_session), dev, GIB(p.available), what);
}
