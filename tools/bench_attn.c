/* personaplex-bench attn: the CPU backend's attention of one query over a filled KV ring, per
 * ring format and context, at the temporal transformer's shape (32 heads of 128, a 3000-slot
 * ring). Each "frame" runs the layers' attention once, each layer on its own ring, so the
 * rings come from memory as they do in a real frame. Prints the median ms per layer and per
 * frame, the bytes of keys, values and their scales read per frame, and GB/s against memcpy's
 * bandwidth (read + write, so a pure read can exceed 100 %).
 *   personaplex-bench attn [--threads N] [--layers N] [--contexts 100,1000,3000] [--kv f32,bf16,int8]
 *                          [--frames N] */
#include "bench.h"

#include "backend/backend.h"
#include "io/half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADS 32
#define HEAD_DIM 128
#define CAPACITY 3000
#define MAX_FRAMES 64

static const char *const kv_names[] = {"f32", "bf16", "int8"};
static const size_t kv_size[] = {4, 2, 1};

static int usage(void) {
    fprintf(stderr, "usage: personaplex-bench attn [--threads N] [--layers N] [--contexts 100,1000,3000] "
                    "[--kv f32,bf16,int8] [--frames N]\n");
    return 2;
}

/* Rings of `layers` layers in format f, every slot filled with random values and scales. */
static int fill_rings(pp_backend *be, pp_kv_format f, int layers, pp_kv_ring *rings) {
    size_t elems = (size_t)CAPACITY * HEADS * HEAD_DIM, scales = (size_t)CAPACITY * HEADS;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int l = 0; l < layers; l++) {
        pp_kv_ring *r = &rings[l];
        *r = (pp_kv_ring){.fmt = f, .capacity = CAPACITY, .window = CAPACITY};
        r->k = be->ops->alloc(be, elems * kv_size[f]), r->v = be->ops->alloc(be, elems * kv_size[f]);
        r->kscale = be->ops->alloc(be, scales * sizeof(float)), r->vscale = be->ops->alloc(be, scales * sizeof(float));
        if (!r->k || !r->v || !r->kscale || !r->vscale) return -1;
        for (int b = 0; b < 2; b++) {
            void *p = b ? r->v : r->k;
            for (size_t i = 0; i < elems; i++) { /* values in [-1, 1): no subnormals to slow the float rings */
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                float x = (float)(s >> 40) * (2.0f / 16777216.0f) - 1.0f;
                if (f == PP_KV_INT8) ((int8_t *)p)[i] = (int8_t)(x * 127);
                if (f == PP_KV_BF16) ((uint16_t *)p)[i] = pp_f32_to_bf16(x);
                if (f == PP_KV_F32) ((float *)p)[i] = x;
            }
        }
        for (size_t i = 0; i < scales; i++) r->kscale[i] = r->vscale[i] = 0.01f;
    }
    return 0;
}

static void free_rings(pp_backend *be, int layers, pp_kv_ring *rings) {
    for (int l = 0; l < layers; l++) {
        be->ops->release(be, rings[l].k);
        be->ops->release(be, rings[l].v);
        be->ops->release(be, rings[l].kscale);
        be->ops->release(be, rings[l].vscale);
    }
}

int bench_attn(int argc, char **argv) {
    int threads = 0, layers = 32, frames = 9, contexts[8] = {100, 1000, 3000}, n_ctx = 3, kv_on[3] = {1, 1, 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (strcmp(a, "--threads") == 0)
            threads = atoi(v);
        else if (strcmp(a, "--layers") == 0)
            layers = atoi(v);
        else if (strcmp(a, "--frames") == 0)
            frames = atoi(v);
        else if (strcmp(a, "--contexts") == 0) {
            n_ctx = 0;
            for (const char *c = v; *c && n_ctx < 8; c = strchr(c, ',') ? strchr(c, ',') + 1 : "")
                contexts[n_ctx++] = atoi(c);
        } else if (strcmp(a, "--kv") == 0) {
            for (int f = 0; f < 3; f++) kv_on[f] = strstr(v, kv_names[f]) != NULL;
        } else
            return usage();
        i++;
    }
    if (threads < 0 || layers < 1 || frames < 1 || frames > MAX_FRAMES) return usage();
    for (int c = 0; c < n_ctx; c++)
        if (contexts[c] < 1 || contexts[c] > CAPACITY) return usage();
    double bw;
    pp_backend *be = bench_cpu_backend(threads, &bw);
    if (!be) return 1;
    printf("attention: %d layers of %d heads x %d, ring of %d; memcpy bandwidth %.1f GB/s (read + write)\n", layers,
           HEADS, HEAD_DIM, CAPACITY, bw);
    printf("%-5s %7s %12s %12s %12s %9s %9s\n", "kv", "context", "ms/layer", "ms/frame", "MB/frame", "GB/s",
           "% memcpy");
    pp_kv_ring *rings = calloc((size_t)layers, sizeof *rings);
    float *qkv = malloc(sizeof(float) * 3 * HEADS * HEAD_DIM), *out = malloc(sizeof(float) * HEADS * HEAD_DIM);
    int rc = rings && qkv && out ? 0 : 1;
    for (int i = 0; !rc && i < 3 * HEADS * HEAD_DIM; i++) qkv[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (int f = 0; f < 3 && !rc; f++) {
        if (!kv_on[f]) continue;
        if (fill_rings(be, (pp_kv_format)f, layers, rings)) {
            fprintf(stderr, "personaplex-bench: no memory for %d %s rings\n", layers, kv_names[f]);
            rc = 1;
        }
        for (int c = 0; c < n_ctx && !rc; c++) {
            int32_t pos = contexts[c] - 1; /* the query sees keys 0..pos */
            double t[MAX_FRAMES];
            for (int fr = 0; fr < frames; fr++) {
                double t0 = bench_now();
                for (int l = 0; l < layers; l++)
                    be->ops->attn_rows(be, qkv, 1, HEADS, HEAD_DIM, 0.0f, &rings[l], NULL, 0, &pos, out);
                t[fr] = bench_now() - t0;
            }
            bench_sort(t, frames);
            double ms = t[frames / 2] * 1e3;
            double bytes =
                (double)layers * contexts[c] * HEADS * (2.0 * HEAD_DIM * kv_size[f] + (f == PP_KV_INT8 ? 8 : 0));
            double gbps = bytes / (ms * 1e-3) / 1e9;
            printf("%-5s %7d %12.3f %12.2f %12.1f %9.2f %8.0f%%\n", kv_names[f], contexts[c], ms / layers, ms,
                   bytes / 1e6, gbps, bw > 0 ? 100 * gbps / bw : 0);
        }
        free_rings(be, layers, rings);
    }
    free(rings);
    free(qkv);
    free(out);
    pp_backend_destroy(be);
    return rc;
}
