/* backend: the table of operations the model code runs on, and nothing else.
 *
 * Model code (src/model) holds a `pp_backend *` and calls be->ops->X(be, ...); it never
 * knows which backend runs it. Activation and state buffers live in backend memory (device
 * memory for CUDA) and are only read on the host through download. Every pointer argument
 * below is backend memory unless its comment says "host". Operations are asynchronous on a
 * device backend: results are ready after sync or download. The CPU backend (cpu.c) is
 * complete and is the reference the others are checked against; a NULL entry means the
 * backend lacks that operation (parity tests report it as skipped).
 *
 * Shapes: a "[n][d]" buffer is n rows of d floats, row-major. */
#ifndef PP_BACKEND_BACKEND_H
#define PP_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "io/weight.h"
#include "personaplex.h" /* pp_backend, pp_kv_format, creating and destroying a backend */

/* One layer's KV ring in backend memory, described on the host. k and v hold
 * [capacity][n_heads·head_dim] elements of fmt (float, bf16 bits as uint16, int8). For INT8,
 * kscale and vscale [capacity][n_heads] hold each stored head's scale: value = q · scale with
 * scale = max|x|/127 over the head's head_dim values (0 for an all-zero head) and
 * q = round(x · (127/max|x|)) (half away from zero, fp32); unused (NULL) for the other formats.
 * BF16 rounds to nearest even. */
typedef struct pp_kv_ring {
    pp_kv_format fmt;
    int capacity, window;
    void *k, *v;
    float *kscale, *vscale;
} pp_kv_ring;

/* Bytes of one stored element of a ring in format fmt. */
static inline size_t pp_kv_elem_bytes(pp_kv_format fmt) { return fmt == PP_KV_F32 ? 4 : fmt == PP_KV_BF16 ? 2 : 1; }

/* Whether n rows of one conversation at positions first .. first + n − 1 may share one attn_rows
 * call on ring r: no row's store lands on a key that an earlier row attends (the oldest key row 0
 * attends is the oldest any row does). */
static inline int pp_kv_ring_takes_rows(const pp_kv_ring *r, int64_t first, int n) {
    const int64_t oldest = first - r->window + 1 > 0 ? first - r->window + 1 : 0;
    return n <= r->capacity && first + n - 1 - r->capacity < oldest;
}

/* A codec convolution (codec operations below): weights in backend memory and the shape.
 * Conv1d: w [cout][cin][k], groups 1. ConvTranspose1d: w [cin][cout/groups][k], groups 1 or
 * groups = cin = cout (depthwise). b [cout] or NULL. No dilation: Mimi has none. */
typedef struct pp_conv {
    const float *w, *b;
    int cin, cout, k, stride, groups;
} pp_conv;

/* Floats of scratch a codec conv call on t input columns needs (the CPU backend's im2col or
 * its transposed-conv product plus overlap-add; a device backend needs no more). */
static inline size_t pp_conv_scratch(const pp_conv *c, int t, int transposed) {
    if (!transposed) return (size_t)(t / c->stride) * c->cin * c->k;
    size_t full = (size_t)c->cout * ((size_t)t * c->stride + c->k - c->stride);
    return (c->groups == 1 ? (size_t)t * c->cout * c->k : 0) + full;
}

/* Sampling settings of one row (sample below), kept in backend memory and uploaded before a
 * frame. The same layout on every backend (kernels/kernels.h mirrors it as pk_sample_param). */
typedef struct pp_sample_param {
    uint64_t seed;
    int64_t frame; /* the draw's counter is frame·PP_SK_STREAMS + stream */
    float temp;    /* <= 0: greedy */
    int32_t top_k; /* <= 0: all */
} pp_sample_param;

/* The rows of a batched codec call (conv1d, conv_tr1d): n conversations, each with its own
 * state arena, every arena of one layout. Row r's state buffer for the call is at byte
 * base[r] + offset. base is backend memory ([n] addresses), so a recorded call reads the rows
 * uploaded before its replay; it may be NULL for a conv without state (k == stride). */
typedef struct pp_state_rows {
    int n;
    const uint64_t *base;
    size_t offset;
} pp_state_rows;

#define PP_CONV_ACCUMULATE 1 /* y += conv(x) instead of y = conv(x) */
#define PP_CONV_REPLICATE 2  /* first call of a replicate-padded conv: history = copies of x[:, 0] */

typedef struct pp_backend_ops {
    const char *name; /* "cpu", "cuda" */
    int max_head_dim; /* the widest attention head attn_rows takes; 0: any */
    /* Frees the backend and everything it still holds (pp_backend_destroy calls it). */
    void (*destroy)(pp_backend *be);

    /* ---- memory ---- */
    void *(*alloc)(pp_backend *be, size_t bytes); /* zero-filled; NULL when out of memory */
    void (*release)(pp_backend *be, void *ptr);
    /* Ordered with the work before and after it; host_src may be reused as soon as the call
     * returns (the caller's staging buffers are, at once), whatever memory it is. */
    void (*upload)(pp_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(pp_backend *be, void *host_dst, const void *src, size_t bytes); /* waits */
    void (*copy)(pp_backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(pp_backend *be, void *dst, size_t bytes);
    void (*sync)(pp_backend *be);

    /* ---- weights ---- */
    /* Copies a host weight (pointers into an mmap) into backend memory, filling dev with the
     * same descriptor and backend pointers. The CPU backend keeps the host pointers. */
    int (*weight_upload)(pp_backend *be, const pp_weight *host, pp_weight *dev, char *err);
    void (*weight_release)(pp_backend *be, pp_weight *dev);
    /* Host bytes [base, base + bytes) (a mapped weight file) stay valid until host_unmap. A
     * device that reads host memory in place (an integrated GPU such as Jetson's, whose DRAM the
     * CPU shares, or any GPU when PP_WEIGHTS_IN_HOST_MEMORY=1) maps the range once, and
     * weight_upload then points into it instead of copying: the weights are held once. Returns
     * 1 when it did, 0 when uploads copy as usual. NULL on the CPU backend (weights stay put). */
    int (*host_map)(pp_backend *be, const void *base, size_t bytes);
    /* Ends a host_map after every weight uploaded from the range was released. */
    void (*host_unmap)(pp_backend *be, const void *base);

    /* ---- linear algebra ---- */
    /* y[n][w.rows] = x[n][w.cols] · wᵀ, for every weight format, without a dequantized copy. */
    void (*matmul)(pp_backend *be, const pp_weight *w, const float *x, int n, float *y);
    /* y += x · wᵀ: a product and the residual add after it in one operation. */
    void (*matmul_add)(pp_backend *be, const pp_weight *w, const float *x, int n, float *y);
    /* y[i][:] (+)= table row ids[i] for i < n; ids are int32 in backend memory (so a recorded
     * frame reads the ids uploaded before it, or tokens sampled inside it). accumulate=0
     * overwrites. */
    void (*embed)(pp_backend *be, const pp_weight *table, const int32_t *ids, int n, float *y, int accumulate);
    /* y[i] = the sum over t < n_tables of tables[t] row ids[id_rows[t]·n + i], for i < n: embed
     * of the first table, then embed with accumulate of each next one, in that order (so the
     * same sums); ids int32 in backend memory, tables and id_rows host arrays the caller keeps
     * (a recording may hold them). One operation so a device reads every table in one pass. */
    void (*embed_sum)(pp_backend *be, const pp_weight *const *tables, const int *id_rows, int n_tables,
                      const int32_t *ids, int n, float *y);
    /* y[i] += x[i] for i < count. */
    void (*add)(pp_backend *be, float *y, const float *x, size_t count);

    /* ---- LM operations (model/transformer.c, model/lm.c) ---- */
    /* Positions are int64 in backend memory (the host uploads them before the frame, so a
     * captured frame (CUDA graph) keeps fixed arguments): a conversation's frame count has no
     * limit in the reference, and int32 wrapped negative after 2^31 frames (1988 days at 12.5 Hz,
     * 994 at the codec's 25 Hz), where pos mod capacity indexed outside the ring. */

    /* y[i] = x[i] · alpha · 1/sqrt(eps + mean(x[i]²)) for i < n rows of d (RMSNorm, fp32
     * statistics; y may equal x). alpha is [d]. */
    void (*rmsnorm)(pp_backend *be, const float *x, const float *alpha, int n, int d, float eps, float *y);
    /* h = rmsnorm(x) as above (n rows of d = w.cols), then y[n][w.rows] = h · wᵀ as matmul: the
     * normalization and the product it feeds in one operation, so a device can prepare the
     * product's input in the normalization's pass. h differs from x and y. */
    void (*norm_matmul)(pp_backend *be, const float *x, const float *alpha, int n, int d, float eps, float *h,
                        const pp_weight *w, float *y);
    /* One query per row against a ring KV cache of any pp_kv_format: for each of n rows (qkv
     * [n][3][n_heads·head_dim]: q, k, v; pos [n] int64), when rope > 0 the row's q and k heads
     * get the interleaved rotary embedding first (pair (2j, 2j+1) of a head rotated by
     * pos · rope^(−2j/head_dim), the angle formed in fp32 as the reference does: freq_j =
     * exp(j·c) with c = −2·ln(rope)/head_dim rounded to fp32, angle = freq_j·pos); qkv's q and k
     * are scratch, left rotated or not. Then the row's k and v are converted to the ring's format
     * and stored at slot pos mod capacity (so the query also sees its own key as stored), and
     * out[n][n_heads·head_dim] = softmax(q·Kᵀ/sqrt(head_dim))·V per head over the keys at
     * positions max(0, pos−window+1) .. pos. ring (host; its buffers backend memory,
     * [capacity][n_heads·head_dim] each, window <= capacity) is the ring itself when tables is
     * NULL: then the rows are one conversation's (a prefill), in position order, and row i
     * attends as if rows 0..i−1 had run before it; the caller keeps their stores off every key a
     * row attends (pp_kv_ring_takes_rows). Else every row has its own conversation's ring of this
     * layer (rows of one conversation may not share such a call: a device runs them in no order): tables
     * (backend memory) holds n pointers, row i's to its conversation's ring descriptors by layer
     * (pp_tf_cache's table), row i uses tables[i][layer], and ring is one row's ring of the
     * layer (every row shares its format, capacity and window). One launch for the batch on a
     * device. */
    void (*attn_rows)(pp_backend *be, float *qkv, int n, int n_heads, int head_dim, float rope, const pp_kv_ring *ring,
                      const pp_kv_ring *const *tables, int layer, const int64_t *pos, float *out);
    /* The gated FFN's output product and its residual add: y[n][w.rows] += m · wᵀ with
     * m[i][j] = silu(u[i][j]) · u[i][hidden + j] for n rows of u [2·hidden], hidden = w.cols. One
     * operation, so a device can form m on the way into the product. */
    void (*matmul_silu_add)(pp_backend *be, const pp_weight *w, const float *u, int n, float *y);

    /* ---- codec operations (model/mimi.c, model/seanet.c, model/quantizer.c) ---- */
    /* Streaming causal Conv1d on channel-major x [cin][t] (t a multiple of stride). hist
     * [cin][k−stride] holds the last inputs of the previous call (zeros after reset) and is
     * updated; y [cout][t/stride], which does not overlap x, gets b + Σ w·[hist, x] per output.
     * flags: PP_CONV_*. With rows (pp_state_rows) the call runs rows->n conversations at once:
     * x [n][cin][t], y [n][cout][t/stride], row r's history in its own state (hist unused),
     * scratch n times pp_conv_scratch. */
    void (*conv1d)(pp_backend *be, const pp_conv *c, const float *x, int t, float *hist, const pp_state_rows *rows,
                   float *y, float *scratch, int flags);
    /* Streaming causal ConvTranspose1d: x [cin][t] -> y [cout][t·stride]. tail [cout][k−stride]
     * holds the bias-free partial sums that overlap the next call (zeros after reset), updated.
     * rows: as conv1d's (x [n][cin][t], y [n][cout][t·stride], each row's tail in its state). */
    void (*conv_tr1d)(pp_backend *be, const pp_conv *c, const float *x, int t, float *tail, const pp_state_rows *rows,
                      float *y, float *scratch);
    /* y[i] = ELU(x[i]) (alpha 1, expm1 form) for i < n; y may equal x. */
    void (*elu)(pp_backend *be, const float *x, float *y, size_t n);
    /* x[i] = GELU(x[i]), the exact erf form, in place. */
    void (*gelu)(pp_backend *be, float *x, size_t n);
    /* LayerNorm over each of n rows of d: (x − mean)/sqrt(var + eps)·w + b (biased variance). */
    void (*layer_norm)(pp_backend *be, const float *x, const float *w, const float *b, int n, int d, float eps,
                       float *y);
    /* y[j][b][i] = x[b][i][j]: n blocks x [n][rows][cols] to y [cols][n][rows] (channel-major
     * conversations to one time-major batch; n = 1 is the plain transpose); y != x. */
    void (*transpose)(pp_backend *be, const float *x, int n, int rows, int cols, float *y);
    /* y[i][j] += scale[j]·x[i][j] for n rows of d (LayerScale residual). */
    void (*scale_add)(pp_backend *be, float *y, const float *x, const float *scale, int n, int d);
    /* For each of n rows x [n][dim]: the nearest row of codebook cb [bins][dim] to x by Euclidean
     * distance, computed as sqrt(max(|x|² − 2x·e + |e|², 0)) with cb_sq [bins] = |e|², first
     * index on ties; writes it to code[r·code_stride] (backend memory: a frame's codes stay there
     * and leave in one download). When subtract, x −= that row (the residual for the next RVQ
     * level). */
    void (*vq_nearest)(pp_backend *be, const float *cb, const float *cb_sq, int bins, int dim, float *x, int n,
                       int subtract, int32_t *code, int code_stride);
    /* y[r] [dim] += cb row code[r·code_stride] for n rows (codes: backend memory); a code outside
     * 0..bins-1 adds nothing. */
    void (*vq_add_row)(pp_backend *be, const float *cb, int bins, int dim, const int32_t *code, int code_stride, int n,
                       float *y);

    /* ---- sampling (text and audio tokens; logits never leave the backend) ---- */
    /* For each row r < rows: tokens[r] (backend int32) = forced[r] when forced (backend, may be
     * NULL: nothing forced) holds forced[r] >= 0, else a token drawn from logits row r
     * ([rows][n]) with params[r] (backend memory). temp <= 0: greedy, the largest logit, lowest
     * index on ties, NaN never wins. Else the top_k largest (top_k <= 0 or > n: all n; boundary
     * ties keep the lowest indices) race: argmax of l/temp − log(−log(U_i)) with U_i =
     * pp_sk_uniform(seed, frame·PP_SK_STREAMS + stream, i) (backend/sample_key.h), so every
     * backend draws the same token for the same (seed, frame, stream), whatever the other rows
     * hold, and a recorded frame draws anew once new frame numbers are uploaded. */
    void (*sample)(pp_backend *be, const float *logits, int rows, int n, const pp_sample_param *params, int stream,
                   const int32_t *forced, int32_t *tokens);

    /* ---- device hooks: NULL on the CPU backend ---- */
    /* First device error since creation (0 if none), its message (file, line, statement) in
     * err. Operations return nothing, so a device backend keeps the first failure here. */
    int (*last_error)(pp_backend *be, char *err);
    /* Recorded frames: run_recorded runs the operations issue(arg) issues as the frame `key`
     * (nonzero, the caller's name for one shape of its work): the backend may record them the
     * first times and replay the recording later instead of calling issue (graph_cache.h says
     * when). Recorded operations keep their arguments, so
     * positions, ids, codes and sampling settings come from backend memory, uploads happen before
     * the call, and nothing issue does downloads, syncs or allocates. forget_recorded: the key
     * will not run again. Use pp_backend_run_recorded, which runs issue plainly on a backend
     * without recordings. */
    int (*run_recorded)(pp_backend *be, uint64_t key, void (*issue)(void *arg), void *arg, char *err);
    void (*forget_recorded)(pp_backend *be, uint64_t key);
    /* The numbered graph slots run_recorded is built on (graph_cache.c; tests drive them
     * directly): graph_begin starts recording the operations that follow into graph `slot`
     * instead of running them; graph_end stops, instantiates and runs it; graph_replay runs
     * it again, or returns PP_ENOTFOUND when the slot holds no graph (never recorded, or
     * dropped because the backend's own workspace moved). */
    int (*graph_begin)(pp_backend *be, int slot, char *err);
    int (*graph_end)(pp_backend *be, int slot, char *err);
    int (*graph_replay)(pp_backend *be, int slot, char *err);
    /* Device memory in bytes: weights uploaded, buffers from alloc (activations, KV caches),
     * the backend's own workspace, and the device's free and total memory; then the weight
     * bytes read in place from host memory (host_map), which take no device memory. */
    void (*mem_info)(pp_backend *be, size_t *weights, size_t *buffers, size_t *workspace, size_t *dev_free,
                     size_t *dev_total, size_t *in_place);
    /* Device work items run since the backend was created: kernels, cuBLAS calls and
     * device-side copies, each node of a replayed recording counted (kernels.h pk_nodes). The
     * difference across a frame is its node count, what launch costs scale with. NULL on the
     * CPU backend. */
    uint64_t (*nodes_run)(pp_backend *be);
    /* Device memory traffic, where the backend counts it (the CUDA emulation does: kernels.h
     * pk_device_traffic): the first call starts counting, in device memory allocated from then
     * on; each call passes fn (NULL: drops them) every work item run since the previous call, in
     * order: its name (a kernel's launch expression), bytes read and bytes written. 0, or -1
     * where nothing counts it (a GPU). NULL on the CPU backend. */
    int (*device_traffic)(pp_backend *be, void (*fn)(void *arg, const char *name, uint64_t read, uint64_t written),
                          void *arg);
    /* The device's name for logs ("GPU 0: ... (sm_90)") and whether its memory is the host's
     * (an integrated GPU: weights and KV count once against the host's DRAM). */
    void (*describe)(pp_backend *be, char *name, size_t cap, int *shares_host_memory);
} pp_backend_ops;

struct pp_backend {
    const pp_backend_ops *ops;
    void *impl; /* backend-private context */
};

/* PP_OK when be's attention takes heads of head_dim values, else PP_EUNSUPPORTED naming what (a
 * model and its part), so a model is refused when it opens rather than failing every frame. */
int pp_backend_check_head_dim(pp_backend *be, int head_dim, const char *what, char *err);
/* PP_OK, or the device's first failure (last_error) with its message in err: operations return
 * nothing, so whatever issues a load's or a frame's work asks here before reporting it done. A
 * device keeps its failure, so every later call fails the same way. */
int pp_backend_device_error(pp_backend *be, char *err);
/* Whether the backend's buffers take host memory: the CPU's, or an integrated GPU's (describe). */
int pp_backend_uses_host_memory(pp_backend *be);
/* be->ops->run_recorded, or issue(arg) where the backend records nothing. */
int pp_backend_run_recorded(pp_backend *be, uint64_t key, void (*issue)(void *arg), void *arg, char *err);
void pp_backend_forget_recorded(pp_backend *be, uint64_t key);
/* A key no other caller of run_recorded in the process holds. */
uint64_t pp_backend_new_key(void);

/* One of a caller's recent shapes of recorded work and its key; key 0: a free entry. */
typedef struct pp_recorded_shape {
    uint64_t key, shape, used; /* used: the caller's clock at the shape's last run */
} pp_recorded_shape;
/* The key for `shape` among a caller's `count` recent shapes: the entry already holding it, else
 * a new key in a free entry or in place of the least recently used shape (its recording is
 * forgotten). A caller whose shapes alternate (batches whose row count changes from frame to
 * frame) then replays each instead of recording anew; `clock` counts the caller's runs. */
uint64_t pp_backend_shape_key(pp_backend *be, pp_recorded_shape *shapes, int count, uint64_t shape, uint64_t *clock);
/* Forgets the keys of all `count` shapes (the caller's work goes away). */
void pp_backend_forget_shapes(pp_backend *be, pp_recorded_shape *shapes, int count);

#endif
