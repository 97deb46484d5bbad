/* cuda: the CUDA backend's host side: device and stream, cuBLAS handle, memory with VRAM
 * accounting, weight upload through bounded pinned staging, CUDA-graph capture, and the
 * operation table, each entry a thin call into kernels/ (kernels.h) on the backend's stream.
 *
 * Operations return nothing, so a failing CUDA call is logged once and kept as the backend's
 * sticky error (ops->last_error); functions that can return one do so through PP_CUDA_TRY,
 * which names the file, line and statement. Nothing here aborts. */
#ifdef PP_HAVE_CUDA

#include "backend/backend.h"
#include "backend/graph_cache.h"

#include "base/err.h"
#include "base/log.h"
#include "base/number.h"
#include "kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert((int)PK_F32 == (int)PP_WF_F32 && (int)PK_F16 == (int)PP_WF_F16 && (int)PK_BF16 == (int)PP_WF_BF16 &&
                   (int)PK_NF2 == (int)PP_WF_NF2 && (int)PK_INT4 == (int)PP_WF_INT4 && (int)PK_NF4 == (int)PP_WF_NF4 &&
                   (int)PK_Q4_0 == (int)PP_WF_Q4_0 && (int)PK_Q8_0 == (int)PP_WF_Q8_0 &&
                   (int)PK_Q4K == (int)PP_WF_Q4K && (int)PK_INT8 == (int)PP_WF_INT8,
               "kernels.h format numbers follow pp_wformat");
_Static_assert((int)PK_KV_F32 == (int)PP_KV_F32 && (int)PK_KV_BF16 == (int)PP_KV_BF16 &&
                   (int)PK_KV_INT8 == (int)PP_KV_INT8,
               "kernels.h KV formats follow pp_kv_format");

#define STAGE_BYTES ((size_t)32 << 20) /* per pinned staging buffer; two alternate */
#define WS_INITIAL ((size_t)4 << 20)   /* workspace floats at start (16 MB); grows on demand */
#define GRAPH_SLOTS 8
#define HOST_MAPS 4 /* weight files read in place at once (one LM file; room for tests) */
#define SLOW_TOLD 32 /* shapes named in slow-product warnings; past that, one last line says so */

/* A host range (a mapped weight file) registered with the device, and its device address. */
typedef struct host_range {
    const uint8_t *base;
    size_t bytes;
    uint8_t *dev;
} host_range;

typedef struct alloc_rec {
    void *ptr;
    size_t bytes;
} alloc_rec;

/* An operation held back until the next one arrives (see "hand-overs" below): a product
 * (normalized first when alpha is set) or an attention, with its arguments, and its input as
 * the operation before handed it over (has_in). */
typedef enum { HELD_NONE, HELD_MATMUL, HELD_ATTN } held_kind;
typedef struct held_op {
    held_kind kind;
    int n, has_in;
    pk_next in;
    /* HELD_MATMUL */
    pk_weight w;
    const float *x, *alpha;
    float eps, *h, *y;
    int d, x_gated, accumulate;
    /* HELD_ATTN */
    float *qkv, rope, *out;
    int n_heads, head_dim, layer;
    pk_kv_ring ring;
    const pk_kv_ring *const *tables;
    const int64_t *pos;
} held_op;

/* A product's shape as far as the kernel choice goes (many: more than PK_GEMV_MAX_BATCH inputs). */
typedef struct slow_shape {
    int fmt, group, many;
    int64_t rows, cols;
} slow_shape;

typedef struct cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws; /* cuBLAS's own workspace, set before any capture: it must not allocate in one */
    size_t blas_ws_bytes;
    float *ws; /* kernels' workspace: NF2 rotations, prepared activations, attention splits */
    size_t ws_floats;
    unsigned *tickets; /* zeroed counters the attention's last blocks draw from (and zero again) */
    size_t n_tickets;
    held_op held;
    int hand_over;   /* hand-overs on (PP_CUDA_HAND_OVER=1; off by default) */
    void *handed[2]; /* handed-over inputs, alternating: a product reads one, prepares the other */
    size_t handed_bytes[2];
    int handed_turn;
    unsigned *handed_counts; /* zeroed counters of the hand-overs and attending products (left zeroed) */
    size_t handed_counts_bytes;
    void *stage[2];
    cudaEvent_t stage_done[2];
    cudaGraphExec_t graph[GRAPH_SLOTS];
    uint64_t graph_nodes[GRAPH_SLOTS]; /* nodes each slot's recording holds */
    uint64_t nodes_at_begin;           /* pk_nodes() when the recording began */
    uint64_t nodes_replayed;
    pp_graph_cache *graphs; /* which frame each slot records (run_recorded) */
    int capturing;
    size_t weight_bytes, buffer_bytes;
    int in_place;                   /* host_map registers: integrated GPU or PP_WEIGHTS_IN_HOST_MEMORY */
    unsigned host_register_flags;   /* mapped, and read-only where the device supports it */
    host_range maps[HOST_MAPS];
    int n_maps;
    size_t in_place_bytes, in_place_weights; /* weights read from host ranges, not copied */
    alloc_rec *allocs; /* live alloc() buffers, for the accounting on release */
    size_t n_allocs, cap_allocs;
    int error;
    char error_msg[PP_ERR_LEN];
    slow_shape slow_told[SLOW_TOLD]; /* shapes already logged as taking a slow product */
    int n_slow_told;
} cuda_ctx;

static cuda_ctx *ctx_of(pp_backend *be) { return be->impl; }

/* Formats and returns a device error; the first one is also kept as the sticky error. */
static int cuda_fail(cuda_ctx *c, char *err, int rc, const char *file, int line, const char *stmt) {
    const char *what = rc == -1 ? "cuBLAS call failed" : cudaGetErrorString((cudaError_t)rc);
    /* Reported here: the runtime's last error is reset, or the next kernel launcher, which reads
     * it to learn whether its launch failed (kernels.h), would report this failure as its own
     * (the next backend's first launch, after a creation that failed). */
    cudaGetLastError();
    char msg[PP_ERR_LEN];
    snprintf(msg, sizeof msg, "cuda: %s:%d: %s: %s", file, line, stmt, what);
    if (c && !c->error) {
        c->error = PP_EDEVICE;
        snprintf(c->error_msg, sizeof c->error_msg, "%s", msg);
        PP_ERROR("cuda", "%s", msg);
    }
    return pp_fail(err, PP_EDEVICE, "%s", msg);
}

/* In functions returning int: a failing call returns PP_EDEVICE with where and what. */
#define PP_CUDA_TRY(c, err, stmt)                                                                                      \
    do {                                                                                                               \
        int rc_ = (int)(stmt);                                                                                         \
        if (rc_) return cuda_fail((c), (err), rc_, __FILE__, __LINE__, #stmt);                                         \
    } while (0)
/* In operations (void): a failing call is recorded as the sticky error. */
#define CUDA_NOTE(c, stmt)                                                                                             \
    do {                                                                                                               \
        int rc_ = (int)(stmt);                                                                                         \
        if (rc_) cuda_fail((c), NULL, rc_, __FILE__, __LINE__, #stmt);                                                 \
    } while (0)
#define BLAS_RC(stmt) ((stmt) == CUBLAS_STATUS_SUCCESS ? 0 : -1)

static pk_weight to_pk(const pp_weight *w) {
    pk_weight k = {
        .fmt = (int)w->fmt,
        .group = w->group,
        .np2 = w->np2,
        .nested_block = w->nested_block,
        .rows = w->rows,
        .cols = w->cols,
        .elem0 = w->elem0,
        .data = w->data,
        .scales = w->scales,
        .zeros = w->zeros,
        .quant_map = w->quant_map,
        .nested_absmax = w->nested_absmax,
        .nested_map = w->nested_map,
        .nested_offset = w->nested_offset,
        .latency_bound = w->latency_bound,
    };
    return k;
}

/* Makes the workspace at least `floats` long. Not while recording a graph: a recorded kernel
 * keeps the old pointer. */
/* Grows *buf to hold at least `bytes` (a quarter more), zeroed when `zero`: outside a recording,
 * after the stream drained (queued work may still use the old buffer). */
static int grow_buffer(cuda_ctx *c, void **buf, size_t *have, size_t bytes, int zero, const char *what) {
    if (bytes <= *have) return PP_OK;
    if (c->capturing)
        return cuda_fail(c, NULL, (int)cudaErrorStreamCaptureUnsupported, __FILE__, __LINE__,
                         "workspace growth while recording a graph (run the frame once before capturing it)");
    size_t n = bytes + bytes / 4;
    void *p = NULL;
    PP_CUDA_TRY(c, NULL, cudaStreamSynchronize(c->stream));
    PP_CUDA_TRY(c, NULL, cudaMalloc(&p, n));
    const int zeroing = zero ? (int)cudaMemsetAsync(p, 0, n, c->stream) : 0;
    if (zeroing) {
        cudaFree(p); /* the old buffer stays */
        return cuda_fail(c, NULL, zeroing, __FILE__, __LINE__, "cudaMemsetAsync(p, 0, n, c->stream) of a grown buffer");
    }
    cudaFree(*buf);
    *buf = p;
    *have = n;
    /* Recorded graphs hold the old buffer: drop them, their owners record again. */
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (c->graph[i]) {
            cudaGraphExecDestroy(c->graph[i]);
            c->graph[i] = NULL;
        }
    PP_DEBUG("cuda", "%s grown to %.1f MiB", what, (double)n / (1 << 20));
    return PP_OK;
}

static int ws_reserve(cuda_ctx *c, size_t floats) {
    size_t bytes = c->ws_floats * sizeof(float);
    int rc = grow_buffer(c, (void **)&c->ws, &bytes, floats * sizeof(float), 0, "workspace");
    c->ws_floats = bytes / sizeof(float);
    return rc;
}

static int tickets_reserve(cuda_ctx *c, size_t count) {
    size_t bytes = c->n_tickets * sizeof(unsigned);
    int rc = grow_buffer(c, (void **)&c->tickets, &bytes, count * sizeof(unsigned), 1, "attention tickets");
    c->n_tickets = bytes / sizeof(unsigned);
    return rc;
}

/* ---- hand-overs ----
 * A product or attention is held back until the next operation arrives. When that one is an
 * integer product whose input is the held one's output (the next layer's normalized product after
 * a residual add, the FFN's output product after its input product, the output projection after
 * the attention), the held one is issued with that product's plan (pk_next) and its blocks
 * prepare the input as they finish: the preparation kernel goes. Every other operation, and all
 * that waits on, records or frees the stream's work, issues the held one first (settle). */

static void issue_held(cuda_ctx *c, const pk_next *next) {
    held_op *h = &c->held;
    const pk_next *in = h->has_in ? &h->in : NULL;
    if (h->kind == HELD_MATMUL && h->alpha)
        CUDA_NOTE(c, pk_norm_matmul(h->x, h->alpha, h->n, h->d, h->eps, h->h, &h->w, h->y, c->ws, c->ws_floats, c->blas,
                                    in, next, c->stream));
    else if (h->kind == HELD_MATMUL)
        CUDA_NOTE(c, pk_matmul(&h->w, h->x, h->n, h->x_gated, h->accumulate, h->y, c->ws, c->ws_floats, c->blas, in,
                               next, c->stream));
    else if (h->kind == HELD_ATTN)
        CUDA_NOTE(c, pk_attn_rows(h->qkv, h->n, h->n_heads, h->head_dim, h->rope, &h->ring, h->tables, h->layer, h->pos,
                                  h->out, c->ws, c->tickets, next, c->stream));
    h->kind = HELD_NONE;
}

static void settle(cuda_ctx *c) {
    if (c->held.kind != HELD_NONE) issue_held(c, NULL);
}

/* Whether the held operation writes `input` as n rows of `width` floats and can hand it over. */
static int held_writes(const cuda_ctx *c, const float *input, int n, int64_t width, const pk_next *plan) {
    const held_op *h = &c->held;
    if (h->n != n) return 0;
    if (h->kind == HELD_MATMUL)
        return h->y == input && h->w.rows == width && pk_matmul_hands_over(&h->w, n, h->alpha ? h->d : 0);
    if (h->kind == HELD_ATTN)
        return h->out == input && (int64_t)h->n_heads * h->head_dim == width && pk_attn_hands_over(h->head_dim, plan);
    return 0;
}

/* Holds op, a product whose input is `input` (prep: how it takes it, PK_NEXT_*), after issuing the
 * held one: with op's plan when that one writes op's input, so op reads it handed over. */
static void hold_product(cuda_ctx *c, held_op *op, const float *input, int prep) {
    pk_next nx;
    const int64_t width = prep == PK_NEXT_GATED ? 2 * op->w.cols : op->w.cols;
    const int planned =
        c->hand_over && pk_next_plan(&op->w, op->n, op->d, prep, &nx) && held_writes(c, input, op->n, width, &nx);
    const size_t bytes = planned ? pk_next_bytes(&nx) : 0,
                 counts = planned ? pk_next_counts(&nx) * sizeof(unsigned) : 0;
    if (planned && c->handed_bytes[0] >= bytes && c->handed_bytes[1] >= bytes && c->handed_counts_bytes >= counts) {
        nx.x = input;
        nx.alpha = op->alpha;
        nx.eps = op->eps;
        nx.h = op->h;
        pk_next_place(&nx, c->handed[c->handed_turn], c->handed_counts);
        issue_held(c, &nx);
        c->handed_turn ^= 1;
        op->has_in = 1;
        op->in = nx;
    } else {
        settle(c);
        /* The held operation, which may read one of the buffers, went first; now they grow (not
         * while recording: the plain run before a recording grows them), and this product
         * prepares its own input this time. Both grow alike, so a recording finds room on
         * whichever turn it starts. */
        if (planned && !c->capturing && !grow_buffer(c, &c->handed[0], &c->handed_bytes[0], bytes, 0, "hand-over") &&
            !grow_buffer(c, &c->handed[1], &c->handed_bytes[1], bytes, 0, "hand-over"))
            grow_buffer(c, (void **)&c->handed_counts, &c->handed_counts_bytes, counts, 1, "hand-over counters");
    }
    c->held = *op;
}

/* ---- memory ---- */

static void *cuda_alloc(pp_backend *be, size_t bytes) {
    cuda_ctx *c = ctx_of(be);
    void *p = NULL;
    if (c->capturing) {
        cuda_fail(c, NULL, (int)cudaErrorStreamCaptureUnsupported, __FILE__, __LINE__, "alloc while recording");
        return NULL;
    }
    if (c->n_allocs == c->cap_allocs) {
        size_t cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
        alloc_rec *r = realloc(c->allocs, cap * sizeof *r);
        if (!r) return NULL;
        c->allocs = r;
        c->cap_allocs = cap;
    }
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError(); /* out of memory is reported by the NULL, not kept as sticky */
        return NULL;
    }
    int e = (int)cudaMemsetAsync(p, 0, bytes, c->stream);
    if (!e) e = (int)cudaStreamSynchronize(c->stream);
    if (e) { /* not out of memory: the device failed, which is kept */
        cuda_fail(c, NULL, e, __FILE__, __LINE__, "zeroing a new buffer");
        cudaFree(p);
        return NULL;
    }
    c->allocs[c->n_allocs++] = (alloc_rec){p, bytes};
    c->buffer_bytes += bytes;
    return p;
}

static void cuda_release(pp_backend *be, void *ptr) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    if (!ptr) return;
    for (size_t i = 0; i < c->n_allocs; i++)
        if (c->allocs[i].ptr == ptr) {
            c->buffer_bytes -= c->allocs[i].bytes;
            c->allocs[i] = c->allocs[--c->n_allocs];
            break;
        }
    CUDA_NOTE(c, cudaFree(ptr));
}

/* From pageable memory cudaMemcpyAsync returns once the source is staged, so the caller may
 * reuse it (backend.h's contract); from pinned memory it would read the source later, so such a
 * source is copied synchronously. The backend's callers pass pageable buffers. */
static void cuda_upload(pp_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    if (!bytes) return;
    struct cudaPointerAttributes a;
    int pinned = cudaPointerGetAttributes(&a, src) == cudaSuccess && a.type == cudaMemoryTypeHost;
    cudaGetLastError(); /* an unregistered pointer is not an error here */
    CUDA_NOTE(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    if (pinned) CUDA_NOTE(c, cudaStreamSynchronize(c->stream));
}

static void cuda_sync(pp_backend *be) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    if (c->capturing) {
        cuda_fail(c, NULL, (int)cudaErrorStreamCaptureUnsupported, __FILE__, __LINE__, "sync while recording");
        return;
    }
    CUDA_NOTE(c, cudaStreamSynchronize(c->stream));
}

static void cuda_download(pp_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    if (c->capturing) {
        cuda_fail(c, NULL, (int)cudaErrorStreamCaptureUnsupported, __FILE__, __LINE__, "download while recording");
        return;
    }
    if (bytes) CUDA_NOTE(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    cuda_sync(be);
}

static void cuda_copy(pp_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    if (!bytes) return;
    pk_count_node();
    CUDA_NOTE(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

static void cuda_zero(pp_backend *be, void *dst, size_t bytes) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    if (!bytes) return;
    pk_count_node();
    CUDA_NOTE(c, cudaMemsetAsync(dst, 0, bytes, c->stream));
}

/* ---- weights ---- */

/* Host bytes -> device through the two pinned buffers: the copy into one overlaps the DMA out
 * of the other, and no host copy of the whole tensor is ever made. */
static int staged_copy(cuda_ctx *c, uint8_t *dst, const void *src, size_t bytes, int *turn, char *err) {
    const uint8_t *s = src;
    for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
        size_t n = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        int b = (*turn)++ & 1;
        PP_CUDA_TRY(c, err, cudaEventSynchronize(c->stage_done[b]));
        memcpy(c->stage[b], s + off, n);
        PP_CUDA_TRY(c, err, cudaMemcpyAsync(dst + off, c->stage[b], n, cudaMemcpyHostToDevice, c->stream));
        PP_CUDA_TRY(c, err, cudaEventRecord(c->stage_done[b], c->stream));
    }
    return PP_OK;
}

typedef struct part {
    const void *src;
    size_t bytes, off;
} part;

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* The pieces of a stored weight: values or codes of elements [0, elem0 + rows·cols), then the
 * scales, and NF4's tables or INT8's zero points. */
static void weight_parts(const pp_weight *h, part p[5]) {
    size_t numel = (size_t)(h->elem0 + h->rows * h->cols), groups = 0;
    static const int bits[PP_WF_COUNT] = {[PP_WF_F32] = 32, [PP_WF_F16] = 16, [PP_WF_BF16] = 16, [PP_WF_NF2] = 2,
                                          [PP_WF_INT4] = 4, [PP_WF_NF4] = 4,  [PP_WF_INT8] = 8};
    memset(p, 0, 5 * sizeof *p);
    p[0].src = h->data;
    int block_bytes = pp_wformat_block_bytes(h->fmt);
    if (block_bytes) { /* ggml blocks carry their scales */
        p[0].bytes = numel / (size_t)h->group * (size_t)block_bytes;
    } else {
        p[0].bytes = (numel * (size_t)bits[h->fmt] + 7) / 8;
    }
    if (h->fmt >= PP_WF_NF2 && !block_bytes) {
        groups = (numel + (size_t)h->group - 1) / (size_t)h->group;
        p[1].src = h->scales;
        p[1].bytes = groups * (h->fmt == PP_WF_INT8 ? 4 : h->fmt != PP_WF_NF4 ? 2 : h->nested_absmax ? 1 : 4);
    }
    if (h->fmt == PP_WF_INT8 && h->zeros) p[2] = (part){h->zeros, groups, 0};
    if (h->fmt == PP_WF_NF4) {
        p[2] = (part){h->quant_map, 16 * sizeof(float), 0};
        if (h->nested_absmax) {
            p[3] = (part){h->nested_absmax, (groups + (size_t)h->nested_block - 1) / (size_t)h->nested_block * 4, 0};
            p[4] = (part){h->nested_map, 256 * sizeof(float), 0};
        }
    }
    size_t off = 0;
    for (int i = 0; i < 5; i++) {
        p[i].off = off;
        off += align256(p[i].bytes);
    }
}

/* The host range holding [p, p + bytes), or NULL. */
static const host_range *mapped_range(const cuda_ctx *c, const void *p, size_t bytes) {
    for (int i = 0; i < c->n_maps; i++) {
        const host_range *m = &c->maps[i];
        if ((const uint8_t *)p >= m->base && (size_t)((const uint8_t *)p - m->base) <= m->bytes &&
            bytes <= m->bytes - (size_t)((const uint8_t *)p - m->base))
            return m;
    }
    return NULL;
}

/* The device address of host bytes inside a mapped range. */
static const void *device_address(const cuda_ctx *c, const void *p, size_t bytes) {
    const host_range *m = mapped_range(c, p, bytes);
    return m->dev + ((const uint8_t *)p - m->base);
}

/* The third part is INT8's zero points or NF4's table. */
static void set_third_part(pp_weight *dev, const void *device_ptr) {
    if (dev->fmt == PP_WF_INT8)
        dev->zeros = device_ptr;
    else
        dev->quant_map = device_ptr;
}

/* Points dev at the weight's bytes in a mapped host range when every part lies in one and is
 * 16-byte aligned (the kernels load 16 bytes at a time); 0 when it must be copied. */
static int upload_in_place(cuda_ctx *c, const pp_weight *host, const part *p, pp_weight *dev) {
    size_t bytes = 0;
    for (int i = 0; i < 5; i++) {
        if (!p[i].bytes) continue;
        if (((uintptr_t)p[i].src & 15) || !mapped_range(c, p[i].src, p[i].bytes)) return 0;
        bytes += p[i].bytes;
    }
    *dev = *host;
    dev->data = device_address(c, p[0].src, p[0].bytes);
    dev->scales = p[1].bytes ? device_address(c, p[1].src, p[1].bytes) : NULL;
    set_third_part(dev, p[2].bytes ? device_address(c, p[2].src, p[2].bytes) : NULL);
    dev->nested_absmax = p[3].bytes ? device_address(c, p[3].src, p[3].bytes) : NULL;
    dev->nested_map = p[4].bytes ? device_address(c, p[4].src, p[4].bytes) : NULL;
    c->in_place_bytes += bytes;
    c->in_place_weights++;
    return 1;
}

/* The device range a weight points into, if it was uploaded in place. */
static const host_range *in_place_range(const cuda_ctx *c, const void *dev_data) {
    for (int i = 0; i < c->n_maps; i++)
        if ((const uint8_t *)dev_data >= c->maps[i].dev && (const uint8_t *)dev_data < c->maps[i].dev + c->maps[i].bytes)
            return &c->maps[i];
    return NULL;
}

static int cuda_weight_upload(pp_backend *be, const pp_weight *host, pp_weight *dev, char *err) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    part p[5];
    memset(dev, 0, sizeof *dev);
    if ((unsigned)host->fmt >= PP_WF_COUNT)
        return pp_fail(err, PP_EUNSUPPORTED, "cuda: weight '%s': unknown format", host->name ? host->name : "?");
    weight_parts(host, p);
    if (upload_in_place(c, host, p, dev)) return PP_OK;
    size_t total = p[4].off + align256(p[4].bytes);
    uint8_t *base = NULL;
    if (cudaMalloc((void **)&base, total) != cudaSuccess) {
        cudaGetLastError();
        return pp_fail(err, PP_ENOMEM, "cuda: weight '%s': out of device memory for %zu bytes",
                       host->name ? host->name : "?", total);
    }
    int turn = 0, rc = PP_OK;
    for (int i = 0; i < 5 && !rc; i++)
        if (p[i].bytes) rc = staged_copy(c, base + p[i].off, p[i].src, p[i].bytes, &turn, err);
    if (!rc) {
        int e = (int)cudaStreamSynchronize(c->stream);
        if (e) rc = cuda_fail(c, err, e, __FILE__, __LINE__, "cudaStreamSynchronize(c->stream) after a weight upload");
    }
    if (rc) {
        cudaFree(base);
        return rc;
    }
    *dev = *host;
    dev->data = base + p[0].off;
    dev->scales = p[1].bytes ? base + p[1].off : NULL;
    set_third_part(dev, p[2].bytes ? base + p[2].off : NULL);
    dev->nested_absmax = p[3].bytes ? (const float *)(base + p[3].off) : NULL;
    dev->nested_map = p[4].bytes ? (const float *)(base + p[4].off) : NULL;
    c->weight_bytes += total;
    return PP_OK;
}

static void cuda_weight_release(pp_backend *be, pp_weight *dev) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    part p[5];
    if (!dev->data) return;
    weight_parts(dev, p);
    if (in_place_range(c, dev->data)) {
        for (int i = 0; i < 5; i++) c->in_place_bytes -= p[i].bytes;
        c->in_place_weights--;
    } else {
        c->weight_bytes -= p[4].off + align256(p[4].bytes);
        CUDA_NOTE(c, cudaFree((void *)dev->data));
    }
    memset(dev, 0, sizeof *dev);
}

static int cuda_host_map(pp_backend *be, const void *base, size_t bytes) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    if (!c->in_place || !base || !bytes || c->n_maps == HOST_MAPS) return 0;
    /* registration works on whole pages */
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)base & ~(uintptr_t)(page - 1);
    size_t len = ((uintptr_t)base + bytes - start + (size_t)page - 1) & ~(size_t)(page - 1);
    void *dev = NULL;
    cudaError_t e = cudaHostRegister((void *)start, len, c->host_register_flags);
    if (e == cudaSuccess) {
        e = cudaHostGetDevicePointer(&dev, (void *)start, 0);
        if (e != cudaSuccess) cudaHostUnregister((void *)start);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        PP_WARN("cuda", "cannot read the weights in place (%s): copying them to device memory", cudaGetErrorString(e));
        return 0;
    }
    c->maps[c->n_maps++] = (host_range){(const uint8_t *)start, len, dev};
    PP_INFO("cuda", "weights read in place from %.2f GiB of mapped file pages: held once, in memory the CPU and the "
                    "GPU share", (double)len / (1 << 30));
    return 1;
}

static void cuda_host_unmap(pp_backend *be, const void *base) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    for (int i = 0; i < c->n_maps; i++) {
        host_range *m = &c->maps[i];
        if ((const uint8_t *)base < m->base || (const uint8_t *)base >= m->base + m->bytes) continue;
        if (c->stream) CUDA_NOTE(c, cudaStreamSynchronize(c->stream)); /* no kernel may still read it */
        CUDA_NOTE(c, cudaHostUnregister((void *)m->base));
        *m = c->maps[--c->n_maps];
        return;
    }
}

/* ---- linear algebra and LM operations ---- */

/* Says once per shape (format, rows, columns, group, batch side of PK_GEMV_MAX_BATCH) when a
 * product takes a slow kernel: its format has no kernel of its own at that batch size, or its
 * rows do not start on whole 16-byte chunks inside its groups. */
static void tell_slow_path(cuda_ctx *c, const pp_weight *w, const pk_weight *k, int n) {
    const char *path = pk_matmul_slow_path(k, n);
    if (!path || c->n_slow_told > SLOW_TOLD) return;
    const slow_shape shape = {(int)w->fmt, w->group, n > PK_GEMV_MAX_BATCH, w->rows, w->cols};
    for (int i = 0; i < c->n_slow_told; i++) {
        const slow_shape *t = &c->slow_told[i];
        if (t->fmt == shape.fmt && t->group == shape.group && t->many == shape.many && t->rows == shape.rows &&
            t->cols == shape.cols)
            return;
    }
    if (c->n_slow_told == SLOW_TOLD) {
        PP_WARN("cuda", "more shapes take slow products; not naming them");
    } else {
        PP_WARN("cuda",
                "%s products %lld x %lld, group %d (e.g. %s) take %s at %s inputs: slower than the format's "
                "kernels",
                pp_wformat_name(w->fmt), (long long)w->rows, (long long)w->cols, w->group,
                w->name ? w->name : "unnamed", path, shape.many ? "more than 8" : "1 to 8");
        c->slow_told[c->n_slow_told] = shape;
    }
    c->n_slow_told++;
}

static void matmul(pp_backend *be, const pp_weight *w, const float *x, int n, int x_gated, int accumulate, float *y) {
    cuda_ctx *c = ctx_of(be);
    held_op op = {
        .kind = HELD_MATMUL, .n = n, .w = to_pk(w), .x = x, .y = y, .x_gated = x_gated, .accumulate = accumulate};
    tell_slow_path(c, w, &op.w, n);
    if (ws_reserve(c, pk_matmul_workspace(&op.w, n, x_gated))) return;
    hold_product(c, &op, x, x_gated ? PK_NEXT_GATED : PK_NEXT_PLAIN);
}

static void cuda_matmul(pp_backend *be, const pp_weight *w, const float *x, int n, float *y) {
    matmul(be, w, x, n, 0, 0, y);
}

static void cuda_matmul_add(pp_backend *be, const pp_weight *w, const float *x, int n, float *y) {
    matmul(be, w, x, n, 0, 1, y);
}

static void cuda_matmul_silu_add(pp_backend *be, const pp_weight *w, const float *u, int n, float *y) {
    matmul(be, w, u, n, 1, 1, y);
}

static void cuda_embed(pp_backend *be, const pp_weight *table, const int32_t *ids, int n, float *y, int accumulate) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    pk_weight k = to_pk(table);
    CUDA_NOTE(c, pk_embed(&k, ids, n, y, accumulate, c->stream));
}

static void cuda_embed_sum(pp_backend *be, const pp_weight *const *tables, const int *id_rows, int n_tables,
                           const int32_t *ids, int n, float *y) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    pk_weight k[32]; /* the LM has 17 tables */
    if (n_tables > (int)(sizeof k / sizeof k[0])) {
        for (int t = 0; t < n_tables; t++) cuda_embed(be, tables[t], ids + (size_t)id_rows[t] * n, n, y, t > 0);
        return;
    }
    for (int t = 0; t < n_tables; t++) k[t] = to_pk(tables[t]);
    CUDA_NOTE(c, pk_embed_sum(k, id_rows, n_tables, ids, n, y, c->stream));
}

static void cuda_add(pp_backend *be, float *y, const float *x, size_t count) {
    settle(ctx_of(be));
    CUDA_NOTE(ctx_of(be), pk_add(y, x, count, ctx_of(be)->stream));
}

static void cuda_rmsnorm(pp_backend *be, const float *x, const float *alpha, int n, int d, float eps, float *y) {
    settle(ctx_of(be));
    CUDA_NOTE(ctx_of(be), pk_rmsnorm(x, alpha, n, d, eps, y, ctx_of(be)->stream));
}

static void cuda_norm_matmul(pp_backend *be, const float *x, const float *alpha, int n, int d, float eps, float *h,
                             const pp_weight *w, float *y) {
    cuda_ctx *c = ctx_of(be);
    held_op op = {
        .kind = HELD_MATMUL, .n = n, .w = to_pk(w), .x = x, .alpha = alpha, .eps = eps, .h = h, .y = y, .d = d};
    tell_slow_path(c, w, &op.w, n);
    if (ws_reserve(c, pk_matmul_workspace(&op.w, n, 0))) return;
    hold_product(c, &op, x, PK_NEXT_NORM);
}

/* The kernels read ring tables written as pp_kv_ring (the model's) as pk_kv_ring. */
_Static_assert(sizeof(pp_kv_ring) == sizeof(pk_kv_ring) && sizeof(pp_kv_format) == sizeof(int) &&
                   offsetof(pp_kv_ring, capacity) == offsetof(pk_kv_ring, capacity) &&
                   offsetof(pp_kv_ring, window) == offsetof(pk_kv_ring, window) &&
                   offsetof(pp_kv_ring, k) == offsetof(pk_kv_ring, k) &&
                   offsetof(pp_kv_ring, v) == offsetof(pk_kv_ring, v) &&
                   offsetof(pp_kv_ring, kscale) == offsetof(pk_kv_ring, kscale) &&
                   offsetof(pp_kv_ring, vscale) == offsetof(pk_kv_ring, vscale),
               "pk_kv_ring mirrors pp_kv_ring");

static pk_kv_ring to_pk_ring(const pp_kv_ring *r) {
    return (pk_kv_ring){(int)r->fmt, r->capacity, r->window, r->k, r->v, r->kscale, r->vscale};
}

/* Where the held operation is a normalized product that prepares its inputs in its own blocks (the
 * depformer's) and writes this attention's qkv, its blocks run the attention as they complete each
 * head's q, k and v (pk_norm_matmul_attn): one launch for both. Returns 1 when it did. */
static int attend_in_product(cuda_ctx *c, float *qkv, int n, int n_heads, int head_dim, float rope,
                             const pp_kv_ring *ring, const pp_kv_ring *const *tables, int layer, const int64_t *pos,
                             float *out) {
    held_op *h = &c->held;
    if (!c->hand_over || h->kind != HELD_MATMUL || !h->alpha || h->y != qkv || h->n != n || h->has_in) return 0;
    pk_attn_args a = {.n_heads = n_heads,
                      .head_dim = head_dim,
                      .rope_period = rope,
                      .ring = to_pk_ring(ring),
                      .tables = (const pk_kv_ring *const *)tables,
                      .layer = layer,
                      .pos = pos,
                      .out = out};
    const size_t counts = (size_t)n * n_heads * sizeof(unsigned);
    if (!pk_norm_matmul_attends(&h->w, n, h->d, &a)) return 0;
    /* the held product reads no counters: they may grow before it goes (not while recording) */
    if (c->handed_counts_bytes < counts &&
        (c->capturing ||
         grow_buffer(c, (void **)&c->handed_counts, &c->handed_counts_bytes, counts, 1, "hand-over counters")))
        return 0;
    a.counts = c->handed_counts;
    CUDA_NOTE(c, pk_norm_matmul_attn(h->x, h->alpha, n, h->d, h->eps, h->h, &h->w, qkv, &a, c->stream));
    h->kind = HELD_NONE;
    return 1;
}

static void cuda_attn_rows(pp_backend *be, float *qkv, int n, int n_heads, int head_dim, float rope,
                           const pp_kv_ring *ring, const pp_kv_ring *const *tables, int layer, const int64_t *pos,
                           float *out) {
    cuda_ctx *c = ctx_of(be);
    if (attend_in_product(c, qkv, n, n_heads, head_dim, rope, ring, tables, layer, pos, out)) return;
    settle(c);
    if (ws_reserve(c, pk_attn_workspace(n, n_heads, head_dim, ring->capacity)) ||
        tickets_reserve(c, (size_t)n * n_heads))
        return;
    c->held = (held_op){.kind = HELD_ATTN,
                        .n = n,
                        .qkv = qkv,
                        .rope = rope,
                        .out = out,
                        .n_heads = n_heads,
                        .head_dim = head_dim,
                        .layer = layer,
                        .ring = to_pk_ring(ring),
                        .tables = (const pk_kv_ring *const *)tables,
                        .pos = pos};
}

/* ---- codec operations ---- */

static pk_conv to_pk_conv(const pp_conv *p) {
    pk_conv k = {p->w, p->b, p->cin, p->cout, p->k, p->stride, p->groups};
    return k;
}

_Static_assert(sizeof(pk_state_rows) == sizeof(pp_state_rows) &&
                   offsetof(pk_state_rows, n) == offsetof(pp_state_rows, n) &&
                   offsetof(pk_state_rows, base) == offsetof(pp_state_rows, base) &&
                   offsetof(pk_state_rows, offset) == offsetof(pp_state_rows, offset),
               "pk_state_rows mirrors pp_state_rows");

static void cuda_conv1d(pp_backend *be, const pp_conv *cv, const float *x, int t, float *hist,
                        const pp_state_rows *rows, float *y, float *scratch, int flags) {
    settle(ctx_of(be));
    (void)scratch; /* direct convolution: no im2col buffer */
    pk_conv k = to_pk_conv(cv);
    CUDA_NOTE(ctx_of(be), pk_conv1d(&k, x, t, hist, (const pk_state_rows *)rows, y, flags & PP_CONV_ACCUMULATE,
                                    flags & PP_CONV_REPLICATE, ctx_of(be)->stream));
}

static void cuda_conv_tr1d(pp_backend *be, const pp_conv *cv, const float *x, int t, float *tail,
                           const pp_state_rows *rows, float *y, float *scratch) {
    settle(ctx_of(be));
    pk_conv k = to_pk_conv(cv);
    CUDA_NOTE(ctx_of(be), pk_conv_tr1d(&k, x, t, tail, (const pk_state_rows *)rows, y, scratch, ctx_of(be)->stream));
}

static void cuda_elu(pp_backend *be, const float *x, float *y, size_t n) {
    settle(ctx_of(be));
    CUDA_NOTE(ctx_of(be), pk_elu(x, y, n, ctx_of(be)->stream));
}

static void cuda_gelu(pp_backend *be, float *x, size_t n) {
    settle(ctx_of(be));
    CUDA_NOTE(ctx_of(be), pk_gelu(x, n, ctx_of(be)->stream));
}

static void cuda_layer_norm(pp_backend *be, const float *x, const float *w, const float *b, int n, int d, float eps,
                            float *y) {
    settle(ctx_of(be));
    CUDA_NOTE(ctx_of(be), pk_layer_norm(x, w, b, n, d, eps, y, ctx_of(be)->stream));
}

static void cuda_transpose(pp_backend *be, const float *x, int n, int rows, int cols, float *y) {
    settle(ctx_of(be));
    CUDA_NOTE(ctx_of(be), pk_transpose(x, n, rows, cols, y, ctx_of(be)->stream));
}

static void cuda_scale_add(pp_backend *be, float *y, const float *x, const float *scale, int n, int d) {
    settle(ctx_of(be));
    CUDA_NOTE(ctx_of(be), pk_scale_add(y, x, scale, n, d, ctx_of(be)->stream));
}

static void cuda_vq_nearest(pp_backend *be, const float *cb, const float *cb_sq, int bins, int dim, float *x, int n,
                            int subtract, int32_t *code, int code_stride) {
    settle(ctx_of(be));
    CUDA_NOTE(ctx_of(be), pk_vq_nearest(cb, cb_sq, bins, dim, x, n, subtract, code, code_stride, ctx_of(be)->stream));
}

static void cuda_vq_add_row(pp_backend *be, const float *cb, int bins, int dim, const int32_t *code, int code_stride,
                            int n, float *y) {
    settle(ctx_of(be));
    CUDA_NOTE(ctx_of(be), pk_vq_add_row(cb, bins, dim, code, code_stride, n, y, ctx_of(be)->stream));
}

_Static_assert(sizeof(pk_sample_param) == sizeof(pp_sample_param) &&
                   offsetof(pk_sample_param, frame) == offsetof(pp_sample_param, frame) &&
                   offsetof(pk_sample_param, temp) == offsetof(pp_sample_param, temp) &&
                   offsetof(pk_sample_param, top_k) == offsetof(pp_sample_param, top_k),
               "pk_sample_param mirrors pp_sample_param");

static void cuda_sample(pp_backend *be, const float *logits, int rows, int n, const pp_sample_param *params,
                        int stream, const int32_t *forced, int32_t *tokens) {
    settle(ctx_of(be));
    CUDA_NOTE(ctx_of(be), pk_sample(logits, rows, n, (const pk_sample_param *)params, stream, forced, tokens,
                                    ctx_of(be)->stream));
}

/* ---- device hooks ---- */

static int cuda_last_error(pp_backend *be, char *err) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    return c->error ? pp_fail(err, c->error, "%s", c->error_msg) : PP_OK;
}

static int check_slot(int slot, char *err) {
    return slot < 0 || slot >= GRAPH_SLOTS ? pp_fail(err, PP_EINVAL, "cuda: graph slot %d outside 0..%d", slot,
                                                     GRAPH_SLOTS - 1)
                                           : PP_OK;
}

static int cuda_graph_begin(pp_backend *be, int slot, char *err) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    int rc = check_slot(slot, err);
    if (rc) return rc;
    if (c->capturing) return pp_fail(err, PP_EINVAL, "cuda: graph_begin while already recording");
    PP_CUDA_TRY(c, err, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = 1;
    c->nodes_at_begin = pk_nodes();
    return PP_OK;
}

static int cuda_graph_end(pp_backend *be, int slot, char *err) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    cudaGraph_t g = NULL;
    int rc = check_slot(slot, err);
    if (rc) return rc;
    if (!c->capturing) return pp_fail(err, PP_EINVAL, "cuda: graph_end without graph_begin");
    c->capturing = 0;
    c->graph_nodes[slot] = pk_nodes() - c->nodes_at_begin;
    PP_CUDA_TRY(c, err, cudaStreamEndCapture(c->stream, &g));
    if (c->graph[slot]) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(c->graph[slot], g, &info) != cudaSuccess) {
            cudaGetLastError(); /* topology changed: rebuild below */
            cudaGraphExecDestroy(c->graph[slot]);
            c->graph[slot] = NULL;
        }
    }
    if (!c->graph[slot] && cudaGraphInstantiate(&c->graph[slot], g, 0) != cudaSuccess) {
        c->graph[slot] = NULL;
        cudaGraphDestroy(g);
        return cuda_fail(c, err, (int)cudaGetLastError(), __FILE__, __LINE__, "cudaGraphInstantiate");
    }
    cudaGraphDestroy(g);
    PP_CUDA_TRY(c, err, cudaGraphLaunch(c->graph[slot], c->stream));
    return PP_OK;
}

static int cuda_graph_replay(pp_backend *be, int slot, char *err) {
    cuda_ctx *c = ctx_of(be);
    settle(c);
    int rc = check_slot(slot, err);
    if (rc) return rc;
    if (!c->graph[slot]) return pp_fail(err, PP_ENOTFOUND, "cuda: graph slot %d holds no graph", slot);
    PP_CUDA_TRY(c, err, cudaGraphLaunch(c->graph[slot], c->stream));
    c->nodes_replayed += c->graph_nodes[slot];
    return PP_OK;
}

static uint64_t cuda_nodes_run(pp_backend *be) {
    settle(ctx_of(be));
    return pk_nodes() + ctx_of(be)->nodes_replayed;
}

static int cuda_device_traffic(pp_backend *be, pk_traffic_fn fn, void *arg) {
    settle(ctx_of(be));
    return pk_device_traffic(fn, arg);
}

static void cuda_describe(pp_backend *be, char *name, size_t cap, int *shares_host_memory) {
    cuda_ctx *c = ctx_of(be);
    struct cudaDeviceProp p;
    *shares_host_memory = 0;
    if (cudaGetDeviceProperties(&p, c->device) != cudaSuccess) {
        snprintf(name, cap, "GPU %d", c->device);
        return;
    }
    snprintf(name, cap, "GPU %d: %.200s (sm_%d%d%s)", c->device, p.name, p.major, p.minor,
             p.integrated ? ", integrated: memory shared with the CPU" : "");
    *shares_host_memory = p.integrated;
}

static int cuda_run_recorded(pp_backend *be, uint64_t key, void (*issue)(void *), void *arg, char *err) {
    return pp_graph_cache_run(ctx_of(be)->graphs, be, key, issue, arg, err);
}

static void cuda_forget_recorded(pp_backend *be, uint64_t key) { pp_graph_cache_forget(ctx_of(be)->graphs, key); }

static void cuda_mem_info(pp_backend *be, size_t *weights, size_t *buffers, size_t *workspace, size_t *dev_free,
                          size_t *dev_total, size_t *in_place) {
    cuda_ctx *c = ctx_of(be);
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) cudaGetLastError();
    *weights = c->weight_bytes;
    *buffers = c->buffer_bytes;
    *workspace = c->ws_floats * sizeof(float) + c->blas_ws_bytes;
    *dev_free = f;
    *dev_total = t;
    *in_place = c->in_place_bytes;
}

static void cuda_destroy(pp_backend *be);

static const pp_backend_ops cuda_ops = {
    .name = "cuda",
    .max_head_dim = PK_ATTN_MAX_DIM,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .sync = cuda_sync,
    .weight_upload = cuda_weight_upload,
    .weight_release = cuda_weight_release,
    .host_map = cuda_host_map,
    .host_unmap = cuda_host_unmap,
    .matmul = cuda_matmul,
    .embed = cuda_embed,
    .embed_sum = cuda_embed_sum,
    .add = cuda_add,
    .rmsnorm = cuda_rmsnorm,
    .norm_matmul = cuda_norm_matmul,
    .attn_rows = cuda_attn_rows,
    .matmul_add = cuda_matmul_add,
    .matmul_silu_add = cuda_matmul_silu_add,
    .conv1d = cuda_conv1d,
    .conv_tr1d = cuda_conv_tr1d,
    .elu = cuda_elu,
    .gelu = cuda_gelu,
    .layer_norm = cuda_layer_norm,
    .transpose = cuda_transpose,
    .scale_add = cuda_scale_add,
    .vq_nearest = cuda_vq_nearest,
    .vq_add_row = cuda_vq_add_row,
    .sample = cuda_sample,
    .last_error = cuda_last_error,
    .run_recorded = cuda_run_recorded,
    .forget_recorded = cuda_forget_recorded,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_replay = cuda_graph_replay,
    .nodes_run = cuda_nodes_run,
    .device_traffic = cuda_device_traffic,
    .mem_info = cuda_mem_info,
    .describe = cuda_describe,
};

/* ---- lifetime ---- */

static void ctx_free(cuda_ctx *c) {
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < GRAPH_SLOTS; i++)
        if (c->graph[i]) cudaGraphExecDestroy(c->graph[i]);
    for (int i = 0; i < 2; i++) {
        if (c->stage[i]) cudaFreeHost(c->stage[i]);
        if (c->stage_done[i]) cudaEventDestroy(c->stage_done[i]);
    }
    cudaFree(c->ws);
    cudaFree(c->tickets);
    for (int i = 0; i < 2; i++) cudaFree(c->handed[i]);
    cudaFree(c->handed_counts);
    if (c->blas) cublasDestroy(c->blas);
    cudaFree(c->blas_ws);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->allocs);
    pp_graph_cache_destroy(c->graphs);
    free(c);
}

/* The value of environment variable `name` (NULL when unset) and, in *v, its whole decimal
 * integer (pp_parse_integer), or LLONG_MIN when it is not one (which every caller's range
 * rejects). */
static const char *env_integer(const char *name, long long *v) {
    const char *s = getenv(name);
    if (s && !pp_parse_integer(s, v)) *v = LLONG_MIN;
    return s;
}

/* Whether weights are read in place from host memory (host_map): on an integrated GPU, whose
 * memory is the host's, a device copy would only hold them twice; elsewhere on request. */
static int host_weights_init(cuda_ctx *c, int device, char *err) {
    int integrated = 0, read_only = 0;
    PP_CUDA_TRY(c, err, cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device));
    PP_CUDA_TRY(c, err, cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, device));
    const char *env = getenv("PP_WEIGHTS_IN_HOST_MEMORY");
    int asked = env && strcmp(env, "1") == 0;
    c->in_place = integrated || asked;
    /* the file's pages are mapped read-only: registering them needs the read-only flag */
    c->host_register_flags = cudaHostRegisterMapped | (read_only ? cudaHostRegisterReadOnly : 0u);
    if (c->in_place)
        PP_INFO("cuda", "weights will be read in place from host memory (%s)",
                integrated ? "integrated GPU: its memory is the host's" : "PP_WEIGHTS_IN_HOST_MEMORY=1: over the bus");
    return PP_OK;
}

static int ctx_init(cuda_ctx *c, int device, char *err) {
    struct cudaDeviceProp prop;
    PP_CUDA_TRY(c, err, cudaSetDevice(device));
    PP_CUDA_TRY(c, err, cudaGetDeviceProperties(&prop, device));
    PP_CUDA_TRY(c, err, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    PP_CUDA_TRY(c, err, BLAS_RC(cublasCreate(&c->blas)));
    PP_CUDA_TRY(c, err, BLAS_RC(cublasSetStream(c->blas, c->stream)));
    /* NVIDIA's advice: 32 MiB on Hopper and later, 4 MiB before */
    c->blas_ws_bytes = (size_t)(prop.major >= 9 ? 32 : 4) << 20;
    PP_CUDA_TRY(c, err, cudaMalloc(&c->blas_ws, c->blas_ws_bytes));
    PP_CUDA_TRY(c, err, BLAS_RC(cublasSetWorkspace(c->blas, c->blas_ws, c->blas_ws_bytes)));
    PP_CUDA_TRY(c, err, cudaMalloc((void **)&c->ws, WS_INITIAL * sizeof(float)));
    c->ws_floats = WS_INITIAL;
    c->graphs = pp_graph_cache_create(GRAPH_SLOTS);
    if (!c->graphs) return pp_fail(err, PP_ENOMEM, "cuda backend: out of memory");
    for (int i = 0; i < 2; i++) {
        PP_CUDA_TRY(c, err, cudaMallocHost(&c->stage[i], STAGE_BYTES));
        PP_CUDA_TRY(c, err, cudaEventCreateWithFlags(&c->stage_done[i], cudaEventDisableTiming));
    }
    /* Programmatic dependent launch (common.cuh): sm_90 on; PP_CUDA_PDL=0 turns it off, to time
     * both ways. */
    const char *pdl = getenv("PP_CUDA_PDL");
    pk_set_programmatic_launch(prop.major >= 9 && !(pdl && strcmp(pdl, "0") == 0));
    /* Two fusions that save launches (docs/backend.md §2.2): small products preparing their input
     * in their own blocks (PP_CUDA_SELF_PREP=1) and products and attention preparing the next
     * product's input as they finish (PP_CUDA_HAND_OVER=1). They cost more than the launches they
     * save on an H200: NF2 frame, int8 KV, context 3000, temporal + depformer 4.05 + 1.60 ms with
     * both off, 4.34 + 2.87 ms with both on. Off unless asked for; tools/gpu-check.sh times them. */
    const char *self = getenv("PP_CUDA_SELF_PREP");
    pk_set_self_prepare(self && strcmp(self, "1") == 0);
    const char *hand_over = getenv("PP_CUDA_HAND_OVER");
    c->hand_over = hand_over && strcmp(hand_over, "1") == 0;
    pk_set_device_sms(prop.multiProcessorCount);
    /* Where the integer tensor cores take over from the integer GEMV (0: never, the TF32 product
     * past 8 inputs), to time the ways against each other */
    long long v;
    const char *imma_min = env_integer("PP_CUDA_IMMA_MIN", &v);
    if (imma_min) {
        if (v != 0 && (v < 2 || v > PK_GEMV_MAX_BATCH + 1))
            return pp_fail(err, PP_EINVAL, "cuda: PP_CUDA_IMMA_MIN=%s: give 2..%d inputs, or 0 for never", imma_min,
                           PK_GEMV_MAX_BATCH + 1);
        pk_set_imma_min_batch(v ? (int)v : INT_MAX);
    }
    /* Keys per attention block (0: by the launch's size, attn.cu), to time the spans */
    const char *span = env_integer("PP_CUDA_ATTN_SPAN", &v);
    if (span) {
        if (v < 0 || v % 64 || v > (1 << 20))
            return pp_fail(err, PP_EINVAL, "cuda: PP_CUDA_ATTN_SPAN=%s: give a multiple of 64 keys, or 0", span);
        pk_set_attn_span((int)v);
    }
    /* Whether int8 attention loads ahead (attn.cuh) and the integer tensor-core product asks L1
     * for its activations ahead (gemm_int.cuh), to time each against the kernel without */
    static const struct {
        const char *name;
        void (*set)(int);
    } switches[] = {{"PP_CUDA_ATTN_AHEAD", pk_set_attn_ahead}, {"PP_CUDA_IMMA_L1_AHEAD", pk_set_imma_l1_ahead}};
    for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++) {
        const char *on = env_integer(switches[i].name, &v);
        if (!on) continue;
        if (v != 0 && v != 1) return pp_fail(err, PP_EINVAL, "cuda: %s=%s: give 0 or 1", switches[i].name, on);
        switches[i].set((int)v);
    }
    /* A first kernel launch: a GPU the build has no code for fails here, not mid-conversation. */
    int rc = pk_add(c->ws, c->ws, 1, c->stream);
    if (rc == (int)cudaErrorNoKernelImageForDevice)
        return pp_fail(err, PP_EUNSUPPORTED, "cuda: %s is compute capability %d.%d; this build has kernels for %s",
                       prop.name, prop.major, prop.minor, PP_CUDA_ARCHS_STR);
    if (rc) return cuda_fail(c, err, rc, __FILE__, __LINE__, "pk_add(), the first kernel launch");
    PP_CUDA_TRY(c, err, cudaStreamSynchronize(c->stream));
    size_t f = 0, t = 0;
    PP_CUDA_TRY(c, err, cudaMemGetInfo(&f, &t));
    PP_INFO("cuda", "device %d: %s, compute %d.%d, %d SMs, %.1f GiB (%.1f GiB free); kernels for sm %s%s", device,
            prop.name, prop.major, prop.minor, prop.multiProcessorCount, (double)t / (1 << 30), (double)f / (1 << 30),
            PP_CUDA_ARCHS_STR, pk_programmatic_launch() ? "; programmatic dependent launch" : "");
    return host_weights_init(c, device, err);
}

int pp_backend_cuda_create(int device, pp_backend **out, char *err) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();
        return pp_fail(err, PP_EUNSUPPORTED, "--device cuda: no CUDA device found (driver missing or no GPU)");
    }
    if (device < 0 || device >= count)
        return pp_fail(err, PP_EINVAL, "--device cuda: device %d does not exist (%d present)", device, count);
    pp_backend *be = calloc(1, sizeof *be);
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return pp_fail(err, PP_ENOMEM, "cuda backend: out of memory");
    }
    c->device = device;
    int rc = ctx_init(c, device, err);
    if (rc) {
        ctx_free(c);
        free(be);
        return rc;
    }
    be->ops = &cuda_ops;
    be->impl = c;
    *out = be;
    return PP_OK;
}

static void cuda_destroy(pp_backend *be) {
    cuda_ctx *c = be->impl;
    settle(c);
    if (c->n_allocs || c->weight_bytes)
        PP_WARN("cuda", "destroyed with %zu buffers (%zu bytes) and %zu weight bytes still allocated", c->n_allocs,
                c->buffer_bytes, c->weight_bytes);
    ctx_free(c);
    free(be);
}

#endif
