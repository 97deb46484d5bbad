/* personaplex-bench attn: a backend's attention of one query per conversation over filled KV
 * rings, per ring format and context, at the temporal transformer's shape (32 heads of 128, a
 * 3000-slot ring). Each "frame" runs the layers' attention once, each layer on its own rings, so
 * the rings come from memory as they do in a real frame; with --rows N, N conversations at once,
 * each with its own rings (one launch a layer on a device, as the server's batched tick). Prints
 * the median ms per layer and per frame, the bytes of keys, values and their scales read per
 * frame, and GB/s against the backend's copy bandwidth (memcpy's on the CPU; read + write, so a
 * pure read can exceed 100 %). Rings take rows x layers x 2 x 3000 x 4096 x (4, 2 or 1) bytes:
 * give fewer --layers for many rows.
 *   personaplex-bench attn [--device cpu|cuda] [--threads N] [--rows N] [--layers N]
 *                          [--contexts 100,1000,3000] [--kv f32,bf16,int8] [--frames N] */
#include "bench.h"

#include "backend/backend.h"
#include "io/half.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADS 32
#define HEAD_DIM 128
#define CAPACITY 3000
#define MAX_FRAMES 64

static int usage(void) {
    fprintf(bench_usage_stream(), "usage: personaplex-bench attn [--device cpu|cuda] [--threads N] [--rows N] [--layers N] "
                    "[--contexts 100,1000,3000] [--kv f32,bf16,int8] [--frames N]\n");
    return bench_usage_status();
}

/* `count` rings in format f, every slot filled with the same random values and scales (uploaded
 * from one host copy: the content does not change the time); -1 when out of memory. */
static int fill_rings(pp_backend *be, pp_kv_format f, int count, pp_kv_ring *rings) {
    size_t elems = (size_t)CAPACITY * HEADS * HEAD_DIM, scales = (size_t)CAPACITY * HEADS,
           bytes = elems * pp_kv_elem_bytes(f);
    void *host = malloc(bytes);
    float *host_scales = malloc(scales * sizeof(float));
    if (!host || !host_scales) {
        free(host);
        free(host_scales);
        return -1;
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < elems; i++) { /* values in [-1, 1): no subnormals to slow the float rings */
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float x = (float)(s >> 40) * (2.0f / 16777216.0f) - 1.0f;
        if (f == PP_KV_INT8) ((int8_t *)host)[i] = (int8_t)(x * 127);
        if (f == PP_KV_BF16) ((uint16_t *)host)[i] = pp_f32_to_bf16(x);
        if (f == PP_KV_F32) ((float *)host)[i] = x;
    }
    for (size_t i = 0; i < scales; i++) host_scales[i] = 0.01f;
    int rc = 0;
    for (int l = 0; l < count && !rc; l++) {
        pp_kv_ring *r = &rings[l];
        *r = (pp_kv_ring){.fmt = f, .capacity = CAPACITY, .window = CAPACITY};
        r->k = be->ops->alloc(be, bytes), r->v = be->ops->alloc(be, bytes);
        r->kscale = be->ops->alloc(be, scales * sizeof(float)), r->vscale = be->ops->alloc(be, scales * sizeof(float));
        if (!r->k || !r->v || !r->kscale || !r->vscale) {
            rc = -1;
            break;
        }
        be->ops->upload(be, r->k, host, bytes);
        be->ops->upload(be, r->v, host, bytes);
        be->ops->upload(be, r->kscale, host_scales, scales * sizeof(float));
        be->ops->upload(be, r->vscale, host_scales, scales * sizeof(float));
    }
    be->ops->sync(be);
    free(host);
    free(host_scales);
    return rc;
}

static void free_rings(pp_backend *be, int count, pp_kv_ring *rings) {
    for (int l = 0; l < count; l++) {
        void *p[] = {rings[l].k, rings[l].v, rings[l].kscale, rings[l].vscale};
        for (int i = 0; i < 4; i++)
            if (p[i]) be->ops->release(be, p[i]);
        rings[l] = (pp_kv_ring){0};
    }
}

/* Per row its table of ring descriptors by layer (row r's layer l: rings[r·layers + l]), and the
 * rows' tables, in backend memory (attn_rows' `tables`); the pointers kept for release. */
typedef struct {
    pp_kv_ring **row;
    const pp_kv_ring *const *rows;
} ring_tables;

static int make_tables(pp_backend *be, int n, int layers, const pp_kv_ring *rings, ring_tables *t) {
    t->row = calloc((size_t)n, sizeof *t->row);
    t->rows = be->ops->alloc(be, sizeof(pp_kv_ring *) * (size_t)n);
    if (!t->row || !t->rows) return -1;
    for (int r = 0; r < n; r++) {
        if (!(t->row[r] = be->ops->alloc(be, sizeof(pp_kv_ring) * (size_t)layers))) return -1;
        be->ops->upload(be, t->row[r], rings + (size_t)r * layers, sizeof(pp_kv_ring) * (size_t)layers);
    }
    be->ops->upload(be, (void *)t->rows, t->row, sizeof(pp_kv_ring *) * (size_t)n);
    return 0;
}

static void free_tables(pp_backend *be, int n, ring_tables *t) {
    for (int r = 0; t->row && r < n; r++)
        if (t->row[r]) be->ops->release(be, t->row[r]);
    if (t->rows) be->ops->release(be, (void *)t->rows);
    free(t->row);
    *t = (ring_tables){0};
}

int bench_attn(int argc, char **argv) {
    int threads = 0, rows = 1, layers = 32, frames = 9, contexts[8] = {100, 1000, 3000}, n_ctx = 3,
        kv_on[3] = {1, 1, 1};
    const char *device = "cpu";
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (strcmp(a, "--device") == 0)
            device = v;
        else if (strcmp(a, "--threads") == 0)
            threads = atoi(v);
        else if (strcmp(a, "--rows") == 0)
            rows = atoi(v);
        else if (strcmp(a, "--layers") == 0)
            layers = atoi(v);
        else if (strcmp(a, "--frames") == 0)
            frames = atoi(v);
        else if (strcmp(a, "--contexts") == 0) {
            n_ctx = 0;
            for (const char *c = v; *c && n_ctx < 8; c = strchr(c, ',') ? strchr(c, ',') + 1 : "")
                contexts[n_ctx++] = atoi(c);
        } else if (strcmp(a, "--kv") == 0) {
            for (pp_kv_format f = PP_KV_F32; f <= PP_KV_INT8; f++) kv_on[f] = strstr(v, pp_kv_format_name(f)) != NULL;
        } else
            return usage();
    }
    if (threads < 0 || rows < 1 || rows > 4096 || layers < 1 || frames < 1 || frames > MAX_FRAMES) return usage();
    for (int c = 0; c < n_ctx; c++)
        if (contexts[c] < 1 || contexts[c] > CAPACITY) return usage();
    double bw;
    pp_backend *be = bench_backend(device, threads, &bw);
    if (!be) return 1;
    printf("attention on %s: %d row%s, %d layers of %d heads x %d, ring of %d; copy bandwidth %.1f GB/s (read + "
           "write)\n",
           be->ops->name, rows, rows > 1 ? "s" : "", layers, HEADS, HEAD_DIM, CAPACITY, bw);
    printf("%-5s %7s %12s %12s %12s %9s %9s\n", "kv", "context", "ms/layer", "ms/frame", "MB/frame", "GB/s", "% copy");
    const int count = rows * layers;
    const size_t dim = (size_t)HEADS * HEAD_DIM;
    pp_kv_ring *rings = calloc((size_t)count, sizeof *rings);
    float *qkv_host = malloc(sizeof(float) * 3 * dim * (size_t)rows);
    float *qkv = be->ops->alloc(be, sizeof(float) * 3 * dim * (size_t)rows);
    float *out = be->ops->alloc(be, sizeof(float) * dim * (size_t)rows);
    int64_t *pos_host = malloc(sizeof(int64_t) * (size_t)rows), *pos = be->ops->alloc(be, sizeof(int64_t) * rows);
    int rc = rings && qkv_host && qkv && out && pos_host && pos ? 0 : 1;
    for (size_t i = 0; !rc && i < 3 * dim * (size_t)rows; i++)
        qkv_host[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    if (!rc) be->ops->upload(be, qkv, qkv_host, sizeof(float) * 3 * dim * (size_t)rows);
    for (pp_kv_format f = PP_KV_F32; f <= PP_KV_INT8 && !rc; f++) {
        if (!kv_on[f]) continue;
        ring_tables tables = {0};
        if (fill_rings(be, f, count, rings) || (rows > 1 && make_tables(be, rows, layers, rings, &tables))) {
            fprintf(stderr, "personaplex-bench: no memory for %d %s rings\n", count, pp_kv_format_name(f));
            rc = 1;
        }
        for (int c = 0; c < n_ctx && !rc; c++) {
            for (int r = 0; r < rows; r++) pos_host[r] = contexts[c] - 1; /* the query sees keys 0..pos */
            be->ops->upload(be, pos, pos_host, sizeof(int64_t) * rows);
            double t[MAX_FRAMES];
            for (int fr = 0; fr <= frames; fr++) { /* the first warms up, untimed */
                double t0 = bench_now();
                for (int l = 0; l < layers; l++)
                    be->ops->attn_rows(be, qkv, rows, HEADS, HEAD_DIM, 0.0f, &rings[l], rows > 1 ? tables.rows : NULL,
                                       l, pos, out);
                be->ops->sync(be);
                if (fr) t[fr - 1] = bench_now() - t0;
            }
            bench_sort(t, frames);
            double ms = t[frames / 2] * 1e3;
            double bytes = (double)count * contexts[c] * HEADS *
                           (2.0 * HEAD_DIM * pp_kv_elem_bytes(f) + (f == PP_KV_INT8 ? 8 : 0));
            double gbps = bytes / (ms * 1e-3) / 1e9;
            printf("%-5s %7d %12.3f %12.2f %12.1f %9.2f %8.0f%%\n", pp_kv_format_name(f), contexts[c], ms / layers, ms,
                   bytes / 1e6, gbps, bw > 0 ? 100 * gbps / bw : 0);
        }
        free_tables(be, rows, &tables);
        free_rings(be, count, rings);
    }
    free(rings);
    free(qkv_host);
    free(pos_host);
    if (qkv) be->ops->release(be, qkv);
    if (out) be->ops->release(be, out);
    if (pos) be->ops->release(be, pos);
    pp_backend_destroy(be);
    return rc;
}
