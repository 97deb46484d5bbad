/* attn: KV append + one query against a ring KV cache (f32, bf16 or int8), flash-decoding
 * style, in one launch.
 *
 * With rotary embedding on, every block rotates the query heads it reads, and the key is rotated
 * on its way into the ring (one launch instead of a rotation kernel before).
 * The block of each head whose split holds the newest position first converts the new key and
 * value to the ring's format and stores them (an int8 head's max|x| is one block reduction).
 * The visible keys (positions max(0, pos − window + 1) .. pos) are cut into splits of `span`
 * keys (attn_span); block (head, split, row) runs an online softmax over its keys (each warp
 * PK_ATTN_KEYS(FMT) keys at a time, lanes over head_dim). The grid follows the capacity, not the
 * position (which lives in device memory), so the launch is the same every frame and a captured
 * graph replays it; but only the splits that hold keys work, so a short context costs its keys,
 * not the capacity: the others return at once. With one live split its block writes the output;
 * else each live block leaves (unnormalised output, max, sum) in the workspace, and the last of
 * a (head, row)'s live blocks to finish (a ticket drawn after a fence, as in the CUDA
 * programming guide's last-block reduction) merges them and resets the ticket counter for the
 * next launch. The block that writes a head's output then counts it toward the next product's
 * input slices (pk_next, when the host planned one) and prepares those it completes.
 * A prefill's rows (one ring, consecutive positions) take two launches: every row's key and value
 * stored first, then every row's query over the ring with no store, so row r sees rows 0..r-1 as
 * stored whatever order the blocks run in. */
#include "attn.cuh"
#include "gemv_int.cuh" /* pk_next_after_store: the output handed to the next product */

static int attn_splits(int keys, int span) { return (keys + span - 1) / span; }

/* Blocks of the launch to aim for, per SM: several waves of the ~6 blocks an SM holds, so that
 * the blocks' differing lengths even out. */
#define PK_ATTN_BLOCKS_PER_SM 16

/* Keys a split takes (a power-of-two multiple of PK_ATTN_SPLIT): the longest that still gives
 * PK_ATTN_BLOCKS_PER_SM blocks an SM. Every block first loads and rotates its query, and after
 * its keys reduces its warps, leaves a partial and draws a ticket; at 64 keys (16 KB of an int8
 * head's keys and values) that fixed work is most of a block's time, but one conversation's 32
 * heads need short splits to fill the device. PP_CUDA_ATTN_SPAN=N (cuda.c) fixes it. */
static int attn_span(int n, int n_heads, int keys) {
    const int fixed = pk_attn_span();
    if (fixed) return fixed;
    const int64_t target = (int64_t)PK_ATTN_BLOCKS_PER_SM * pk_device_sms();
    int span = PK_ATTN_SPLIT;
    while (span < keys && (int64_t)n * n_heads * attn_splits(keys, 2 * span) >= target) span *= 2;
    return span;
}

/* Six blocks an SM (24 warps, 192 keys in flight; with int8's loads ahead, also while the warps
 * compute) for heads up to 128 wide, 80 registers, no spill: what the H200 measurements in
 * attn.cuh ran (left to itself, ptxas gives sm_90's int8 instance 72 registers and seven blocks,
 * not timed). Wider heads' instances are left their registers. */
#define PK_ATTN_MIN_BLOCKS(VPL) ((VPL) <= 4 ? 6 : 0)

/* Block (head, row) of a prefill's store: head h of row's key and value into the one ring. */
template <int FMT>
__global__ void __launch_bounds__(PK_ATTN_THREADS)
    pk_kv_store_rows_kernel(const float *__restrict__ qkv, int head_dim, pk_rope rope, pk_kv_ring r,
                            const int64_t *__restrict__ pos) {
    __shared__ float red[32];
    const int h = blockIdx.x, n_heads = gridDim.x, row = blockIdx.y;
    const float *q = qkv + (size_t)row * 3 * n_heads * head_dim;
    pk_kv_store_head<FMT, false>(q, head_dim, r, pos[row], rope, h, n_heads, 0, red);
    pk_kv_store_head<FMT, false>(q, head_dim, r, pos[row], rope, h, n_heads, 1, red);
}

/* Block (head, split, row); with tables NULL every row's key and value are already stored. */
template <int FMT, int VPL, bool AHEAD>
__global__ void __launch_bounds__(PK_ATTN_THREADS, PK_ATTN_MIN_BLOCKS(VPL))
    pk_attn_split_kernel(const float *__restrict__ qkv, int head_dim, pk_rope rope, pk_kv_ring one,
                         const pk_kv_ring *const *__restrict__ tables, int layer, const int64_t *__restrict__ pos,
                         float *__restrict__ part, unsigned *__restrict__ tickets, float *__restrict__ out, int span,
                         pk_next nx) {
    const pk_kv_ring r = tables ? tables[blockIdx.z][layer] : one;
    const int h = blockIdx.x;
    if (pk_attn_block<FMT, VPL, false, PK_ATTN_THREADS / 32, AHEAD>(qkv, head_dim, rope, r, pos, part, tickets, out,
                                                                    h, gridDim.x, blockIdx.y, gridDim.y, span,
                                                                    blockIdx.z, tables != NULL || gridDim.z == 1) &&
        nx.prep)
        pk_next_after_store(nx, blockIdx.z, 1, (int64_t)h * head_dim, (int64_t)(h + 1) * head_dim);
}

template <int FMT, bool AHEAD>
static void launch(const float *qkv, int n, int n_heads, int head_dim, pk_rope rope, const pk_kv_ring *one,
                   const pk_kv_ring *const *tables, int layer, const int64_t *pos, float *ws, unsigned *tickets,
                   float *out, const pk_next &nx, int keys, cudaStream_t stream) {
    const int span = attn_span(n, n_heads, keys);
    dim3 grid((unsigned)n_heads, (unsigned)attn_splits(keys, span), (unsigned)n);
    if (!tables && n > 1)
        PK_LAUNCH_PLAIN(dim3((unsigned)n_heads, (unsigned)n), PK_ATTN_THREADS, 0, stream, pk_kv_store_rows_kernel<FMT>)
    (qkv, head_dim, rope, *one, pos);
    /* An ordinary launch: on sm_90 the wait of a programmatic one cost the int8 instance 8
     * registers (64 -> 72), a resident block per SM, and 22 % of its time on an H200. */
    if (head_dim <= 64) PK_LAUNCH_PLAIN(grid, PK_ATTN_THREADS, 0, stream, pk_attn_split_kernel<FMT, 2, AHEAD>)
    (qkv, head_dim, rope, *one, tables, layer, pos, ws, tickets, out, span, nx);
    else if (head_dim <= 128) PK_LAUNCH_PLAIN(grid, PK_ATTN_THREADS, 0, stream, pk_attn_split_kernel<FMT, 4, AHEAD>)(
        qkv, head_dim, rope, *one, tables, layer, pos, ws, tickets, out, span, nx);
    else PK_LAUNCH_PLAIN(grid, PK_ATTN_THREADS, 0, stream, pk_attn_split_kernel<FMT, PK_ATTN_MAX_DIM / 32, AHEAD>)(
        qkv, head_dim, rope, *one, tables, layer, pos, ws, tickets, out, span, nx);
}

/* The heads' outputs are the next product's plain input; a head spans at most
 * PK_ATTN_MAX_DIM / PK_NEXT_MIN_LEN + 1 slices, within what one block completes at once. */
extern "C" int pk_attn_hands_over(int head_dim, const pk_next *nx) {
    return nx->prep == PK_NEXT_PLAIN && head_dim <= PK_ATTN_MAX_DIM;
}

extern "C" size_t pk_attn_workspace(int n, int n_heads, int head_dim, int capacity) {
    return (size_t)n * n_heads * attn_splits(capacity, PK_ATTN_SPLIT) * (head_dim + 2); /* the shortest span's */
}

extern "C" int pk_attn_rows(const float *qkv, int n, int n_heads, int head_dim, float rope_period,
                            const pk_kv_ring *ring, const pk_kv_ring *const *tables, int layer, const int64_t *pos,
                            float *out, float *ws, unsigned *tickets, const pk_next *next, cudaStream_t stream) {
    if (head_dim > PK_ATTN_MAX_DIM || head_dim <= 0 || n_heads <= 0 || ring->capacity <= 0 || ring->window <= 0 ||
        n <= 0 || (!tables && n > ring->capacity) ||
        (next && (!pk_attn_hands_over(head_dim, next) || next->n != n || next->cols != (int64_t)n_heads * head_dim)))
        return (int)cudaErrorInvalidValue;
    const pk_next nx = next ? *next : pk_next{};
    const int keys = ring->window < ring->capacity ? ring->window : ring->capacity;
    const pk_rope rope = pk_rope_of(rope_period, head_dim);
    switch (ring->fmt) {
    case PK_KV_F32:
        launch<PK_KV_F32, false>(qkv, n, n_heads, head_dim, rope, ring, tables, layer, pos, ws, tickets, out, nx, keys,
                                 stream);
        break;
    case PK_KV_BF16:
        launch<PK_KV_BF16, false>(qkv, n, n_heads, head_dim, rope, ring, tables, layer, pos, ws, tickets, out, nx, keys,
                                  stream);
        break;
    case PK_KV_INT8:
        if (pk_attn_ahead()) /* pk_attn_block's AHEAD */
            launch<PK_KV_INT8, true>(qkv, n, n_heads, head_dim, rope, ring, tables, layer, pos, ws, tickets, out, nx,
                                     keys, stream);
        else
            launch<PK_KV_INT8, false>(qkv, n, n_heads, head_dim, rope, ring, tables, layer, pos, ws, tickets, out, nx,
                                      keys, stream);
        break;
    default: return (int)cudaErrorInvalidValue;
    }
    return pk_launched();
}
