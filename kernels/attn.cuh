/* attn: one query per row against a ring KV cache, the work of one block (attn.cu launches a
 * block per head, split and row; a product whose blocks complete a head's q, k and v runs that
 * head's attention itself, gemv_int.cuh). */
#ifndef PP_KERNELS_ATTN_CUH
#define PP_KERNELS_ATTN_CUH

#include "common.cuh"

#define PK_ATTN_SPLIT 64
#define PK_ATTN_THREADS 128
/* Keys a warp loads ahead: as many as 32 registers of a lane's raw words hold at a 128-wide head
 * (f32 4, bf16 and int8 8: their words are decoded where used), so that many memory round trips
 * overlap. More was not better: with 16 int8 keys (5 blocks an SM for want of registers, not 6) a
 * layer of 64 conversations at context 3000 took 1.68 ms on an H200 where 8 took 0.95, both
 * while each key still paid a 64-bit remainder and quarter-rate conversions (pk_attn_block). */
#define PK_ATTN_KEYS(FMT) ((FMT) == PK_KV_F32 ? 4 : 8)

/* A value other blocks of this launch may have written (FRESH) is read through L2. */
template <bool FRESH> __device__ __forceinline__ float pk_load_fresh(const float *p) { return FRESH ? __ldcg(p) : *p; }

/* bf16 bits of f, round to nearest even, NaN kept NaN (as cpu_lm.c). */
__device__ __forceinline__ uint16_t pk_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* The rotary embedding's rotation of pair j at position p, as the CPU forms it: freq_j =
 * exp(j·c) rounded to fp32 (in double, rounded once, as libm's correctly rounded expf: the
 * device's expf is 2 ulp, and one ulp of frequency is 3.6e-4 rad of angle at position 3000, which
 * failed the first real-GPU parity run), angle = freq_j·p in fp32; the full-precision sincosf keeps
 * angles of thousands of radians accurate. */
struct pk_rope {
    int on;
    float c; /* −2·ln(max_period)/head_dim, rounded to fp32 */
};

/* The rotation of rotary period `period` (0: none) for heads of head_dim. */
static inline pk_rope pk_rope_of(float period, int head_dim) {
    return pk_rope{period > 0, period > 0 ? (float)(-log((double)period) * 2.0 / head_dim) : 0.0f};
}

static __device__ __attribute__((noinline)) void pk_rope_rotate(const pk_rope &rope, int j, int64_t p, float &a, float &b) {
    float co, si;
    sincosf((float)exp((double)((float)j * rope.c)) * (float)p, &si, &co);
    const float x = a, y = b;
    a = x * co - y * si;
    b = x * si + y * co;
}

/* Element d of a new key head (rotated when rope is on; the pair's partner read too) or value head. */
template <bool FRESH>
__device__ __forceinline__ float pk_kv_new(const float *src, int d, int head_dim, int which, const pk_rope &rope,
                                           int64_t p) {
    if (which || !rope.on || (d | 1) >= head_dim) return pk_load_fresh<FRESH>(src + d);
    float a = pk_load_fresh<FRESH>(src + (d & ~1)), b = pk_load_fresh<FRESH>(src + (d | 1));
    pk_rope_rotate(rope, d >> 1, p, a, b);
    return d & 1 ? b : a;
}

/* The block stores head h of the new key (which 0) or value (1) at `slot` in the ring's format.
 * Every thread of the block calls it; it ends with a barrier, so the stored values are visible to
 * the block and red is free again. */
template <int FMT, bool FRESH>
__device__ __forceinline__ void pk_kv_store_head(const float *__restrict__ qkv, int head_dim, const pk_kv_ring &r,
                                                 int64_t p, const pk_rope &rope, int h, int n_heads, int which,
                                                 float *red) {
    const size_t slot = (size_t)(p % r.capacity);
    const int dim = n_heads * head_dim;
    const float *src = qkv + (size_t)(1 + which) * dim + (size_t)h * head_dim;
    const size_t off = slot * dim + (size_t)h * head_dim;
    void *base = which ? r.v : r.k;
    if (FMT == PK_KV_F32) {
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
            ((float *)base)[off + d] = pk_kv_new<FRESH>(src, d, head_dim, which, rope, p);
    } else if (FMT == PK_KV_BF16) {
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
            ((uint16_t *)base)[off + d] = pk_to_bf16(pk_kv_new<FRESH>(src, d, head_dim, which, rope, p));
    } else {
        float mx = 0.0f;
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
            mx = fmaxf(mx, fabsf(pk_kv_new<FRESH>(src, d, head_dim, which, rope, p)));
        mx = pk_warp_max(mx);
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
        __syncthreads();
        mx = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) mx = fmaxf(mx, red[w]);
        const float inv = mx > 0.0f ? 127.0f / mx : 0.0f;
        if (threadIdx.x == 0) (which ? r.vscale : r.kscale)[slot * n_heads + h] = mx / 127.0f;
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
            float q = roundf(pk_kv_new<FRESH>(src, d, head_dim, which, rope, p) * inv);
            if (!(q == q)) q = 0.0f;
            ((int8_t *)base)[off + d] = (int8_t)(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
        }
    }
    __syncthreads();
}

/* Raw loads of BYTES bytes (aligned to their size) into 32-bit words. */
template <int BYTES> __device__ __forceinline__ void pk_load_words(const uint8_t *p, uint32_t *w) {
    if (BYTES == 2) {
        w[0] = *(const uint16_t *)p;
    } else if (BYTES == 4) {
        w[0] = *(const uint32_t *)p;
    } else if (BYTES == 8) {
        const uint2 v = *(const uint2 *)p;
        w[0] = v.x, w[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < BYTES / 16; i++) {
            const uint4 v = ((const uint4 *)p)[i];
            w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
        }
    }
}

/* A lane's VPL values of one key or value as stored: raw words (VPL elements in the ring's
 * format), decoded where used (pk_kv_decode). An int8 slot's scale is loaded once per key by the
 * lanes that hold its score (pk_attn_block), not by every lane. */
template <int FMT, int VPL> struct pk_kv_lane {
    enum { BYTES = VPL * (FMT == PK_KV_F32 ? 4 : FMT == PK_KV_BF16 ? 2 : 1), WORDS = BYTES >= 4 ? BYTES / 4 : 1 };
    uint32_t w[WORDS];
};

/* Elements off .. off + valid - 1 of a ring buffer (the rest 0): one load of VPL elements (not one
 * per element) when whole (the head splits into whole lanes, so every lane's offset is a multiple
 * of VPL), else one by one into the same words. */
template <int FMT, int VPL>
__device__ __forceinline__ void pk_kv_load_lane(const void *base, size_t off, bool whole, int valid,
                                                pk_kv_lane<FMT, VPL> &out) {
    typedef pk_kv_lane<FMT, VPL> L;
    if (whole) {
        pk_load_words<L::BYTES>((const uint8_t *)base + off * (L::BYTES / VPL), out.w);
        return;
    }
#pragma unroll
    for (int i = 0; i < L::WORDS; i++) out.w[i] = 0;
#pragma unroll
    for (int t = 0; t < VPL; t++) {
        if (t >= valid) break;
        if (FMT == PK_KV_F32) out.w[t] = ((const uint32_t *)base)[off + t];
        else if (FMT == PK_KV_BF16) out.w[t / 2] |= (uint32_t)((const uint16_t *)base)[off + t] << (16 * (t % 2));
        else out.w[t / 4] |= (uint32_t)((const uint8_t *)base)[off + t] << (8 * (t % 4));
    }
}

/* A lane's values as floats, before the int8 scale (applied to a key's sum, pk_attn_block). An int8
 * byte b becomes a float without a conversion instruction (a quarter of the float rate): b + 128
 * (b ^ 0x80, unsigned) is placed under 2^23's exponent, a float of value 2^23 + b + 128 exactly,
 * and 2^23 + 128 is subtracted, exactly. */
template <int FMT, int VPL>
__device__ __forceinline__ void pk_kv_decode(const pk_kv_lane<FMT, VPL> &in, float (&out)[VPL]) {
#pragma unroll
    for (int t = 0; t < VPL; t++) {
        if (FMT == PK_KV_F32) out[t] = __uint_as_float(in.w[t]);
        else if (FMT == PK_KV_BF16) out[t] = pk_bf16((uint16_t)(in.w[t / 2] >> (16 * (t % 2))));
        else
            out[t] = __uint_as_float(__byte_perm(in.w[t / 4] ^ 0x80808080u, 0x4B000000u, 0x7440u + t % 4)) - 8388736.0f;
    }
}

/* After a block left its split's partial: draws the (head, row)'s ticket, and the last of its
 * `working` blocks merges their partials ph [working][head_dim + 2] into out [head_dim], zeroes
 * the ticket for the next launch and returns true. Each split's weight exp(max_s − max) is formed once (a
 * thread per split, PK_ATTN_THREADS splits at a time), not once per output value: a separate
 * merge kernel that did so took ~17 µs at 47 splits on an H200. Every thread calls it. Not
 * inlined: the merge's registers stay out of the split loop's allocation. */
static __device__ __attribute__((noinline)) bool pk_attn_merge_last(const float *ph, int working, int head_dim,
                                                             unsigned *ticket, float *out) {
    __shared__ unsigned drawn;
    __shared__ float weight[PK_ATTN_THREADS], red[32];
    /* Every thread's partial is visible device-wide before the ticket is drawn. */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) drawn = atomicAdd(ticket, 1u);
    __syncthreads();
    if (drawn != (unsigned)working - 1) return false;
    __threadfence(); /* the other blocks' partials, seen after their tickets */
    const int stride = head_dim + 2;
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < working; s += blockDim.x) mx = fmaxf(mx, __ldcg(ph + (size_t)s * stride + head_dim));
    mx = pk_block_max(mx, red);
    float acc[PK_ATTN_MAX_DIM / PK_ATTN_THREADS] = {}, sum = 0.0f;
    for (int s0 = 0; s0 < working; s0 += blockDim.x) {
        const int s = s0 + threadIdx.x;
        float f = 0.0f;
        if (s < working) {
            const float ms = __ldcg(ph + (size_t)s * stride + head_dim);
            f = ms == -INFINITY ? 0.0f : expf(ms - mx);
            sum += __ldcg(ph + (size_t)s * stride + head_dim + 1) * f;
        }
        weight[threadIdx.x] = f;
        __syncthreads();
        const int m = working - s0 < (int)blockDim.x ? working - s0 : (int)blockDim.x;
#pragma unroll
        for (int a = 0; a < PK_ATTN_MAX_DIM / PK_ATTN_THREADS; a++) {
            const int d = threadIdx.x + a * PK_ATTN_THREADS;
            if (d < head_dim)
                for (int j = 0; j < m; j++) acc[a] += __ldcg(ph + (size_t)(s0 + j) * stride + d) * weight[j];
        }
        __syncthreads();
    }
    sum = pk_block_sum(sum, red);
#pragma unroll
    for (int a = 0; a < PK_ATTN_MAX_DIM / PK_ATTN_THREADS; a++) {
        const int d = threadIdx.x + a * PK_ATTN_THREADS;
        if (d < head_dim) out[d] = acc[a] / sum;
    }
    if (threadIdx.x == 0) atomicExch(ticket, 0u); /* ready for the next launch */
    return true;
}

/* The sums of G values (a lane's partial dot products with G keys) over the warp, transposed: each
 * halving step exchanges half the values a lane still holds, so the G sums take G − 1 + log2(32 / G)
 * shuffles instead of G·5, and lane L ends with the whole sum of key pk_group_key<G>(L). */
template <int G> __device__ __forceinline__ float pk_warp_sum_group(float (&v)[G], int lane) {
#pragma unroll
    for (int half = G / 2, o = 16; half >= 1; half /= 2, o /= 2) {
        const bool upper = lane & o;
#pragma unroll
        for (int j = 0; j < half; j++) {
            const float keep = upper ? v[j + half] : v[j], give = upper ? v[j] : v[j + half];
            v[j] = keep + __shfl_xor_sync(0xffffffffu, give, o);
        }
    }
    float s = v[0];
#pragma unroll
    for (int o = 16 / G; o >= 1; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

/* The key whose sum pk_warp_sum_group<G> leaves in `lane`, and the first lane holding key u. */
template <int G> __device__ __forceinline__ int pk_group_key(int lane) {
    int u = 0;
#pragma unroll
    for (int half = G / 2, o = 16; half >= 1; half /= 2, o /= 2) u += lane & o ? half : 0;
    return u;
}
template <int G> __device__ __forceinline__ int pk_group_lane(int u) {
    int lane = 0;
#pragma unroll
    for (int half = G / 2, o = 16; half >= 1; half /= 2, o /= 2) lane += u & half ? o : 0;
    return lane;
}

/* The raw keys and values of a warp's group of KEYS keys, p, p + nw, ..., p + (KEYS − 1)·nw,
 * and for int8 the scales of this lane's key of the group (the lanes holding its score load them,
 * two loads a lane a group, not two a key). Slots advance by subtraction, not by a 64-bit
 * remainder per key (a hundred-odd instructions, as much as the rest of an int8 key's work). */
template <int FMT, int VPL, int KEYS> struct pk_attn_group {
    struct where {
        pk_kv_ring r;
        int64_t k1; /* the split's last key */
        int nw;     /* the block's warps: the stride between a warp's keys */
        unsigned dim, head_off, n_heads;
        int h;
        bool live, whole; /* the lane holds values; the head splits into whole lanes */
        int valid, my_key;
    };
    pk_kv_lane<FMT, VPL> k[KEYS] = {}, v[KEYS] = {}; /* a lane past the head keeps zeros */
    float k_scale = 1.0f, v_scale = 1.0f;

    /* The group of p, whose slot is slot_p. A key past the split reads p's slot again: its weight is 0. */
    __device__ __forceinline__ void load(const where &at, int64_t p, int slot_p) {
        unsigned my_slot = 0;
#pragma unroll
        for (int u = 0; u < KEYS; u++) {
            int su = slot_p + u * at.nw;
            while (su >= at.r.capacity) su -= at.r.capacity;
            const unsigned slot = (unsigned)(p + (int64_t)u * at.nw <= at.k1 ? su : slot_p);
            const size_t off = (size_t)slot * at.dim + at.head_off;
            if (u == at.my_key) my_slot = slot;
            if (at.live) {
                pk_kv_load_lane<FMT, VPL>(at.r.k, off, at.whole, at.valid, k[u]);
                pk_kv_load_lane<FMT, VPL>(at.r.v, off, at.whole, at.valid, v[u]);
            }
        }
        if (FMT == PK_KV_INT8) {
            const size_t si = (size_t)my_slot * at.n_heads + at.h;
            k_scale = at.r.kscale[si];
            v_scale = at.r.vscale[si];
        }
    }
};

/* Split `split` of head h of row `row` (of n_heads heads, n_splits splits of `span` keys, a
 * multiple of PK_ATTN_SPLIT): the work of one block of WARPS warps. VPL: consecutive values of
 * head_dim per lane (head_dim <= 32·VPL), loaded as one vector per key and lane; a 128-wide head
 * keeps 4 registers per key. FRESH: other blocks of this launch wrote qkv (a product's epilogue
 * runs it), so it is read through L2. AHEAD: a warp loads its next group of keys before the
 * arithmetic of the present one (attn.cu: int8 rings unless PP_CUDA_ATTN_AHEAD=0). Without it a
 * warp alternates between waiting on its loads and computing, and int8 read at about half bf16's
 * byte rate on an H200 (2.3 against 4.1 TB/s at 64 conversations). Both groups' raw words fit
 * sm_90's 80 registers with no spill for int8 only: bf16's and f32's, twice and four times as
 * many, spill. store: the block holding the newest position stores the row's key and value (else
 * an earlier launch did). Every thread calls it; true in the block that wrote the head's output. */
template <int FMT, int VPL, bool FRESH, int WARPS, bool AHEAD>
__device__ __forceinline__ bool
pk_attn_block(const float *__restrict__ qkv, int head_dim, const pk_rope &rope, const pk_kv_ring &r,
              const int64_t *__restrict__ pos, float *__restrict__ part, unsigned *__restrict__ tickets,
              float *__restrict__ out, int h, int n_heads, int split, int n_splits, int span, int row, bool store) {
    __shared__ float wm[WARPS], wl[WARPS];
    __shared__ float wo[WARPS][PK_ATTN_MAX_DIM];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5; /* WARPS */
    const int dim = n_heads * head_dim;
    const float *q = qkv + (size_t)row * 3 * dim;
    const int64_t last = pos[row], first = last - r.window + 1 > 0 ? last - r.window + 1 : 0;
    const int64_t k0 = first + (int64_t)split * span;
    if (k0 > last) return false; /* a split past the live keys: nothing to do, nothing to merge */
    const int64_t k1 = k0 + span - 1 < last ? k0 + span - 1 : last;
    /* The split holding the newest position stores its key and value first, so this query sees
     * them as stored; no other split reads that slot. */
    if (store && last < k0 + span) {
        __shared__ float red[32];
        pk_kv_store_head<FMT, FRESH>(q, head_dim, r, last, rope, h, n_heads, 0, red);
        pk_kv_store_head<FMT, FRESH>(q, head_dim, r, last, rope, h, n_heads, 1, red);
    }
    const float scale = rsqrtf((float)head_dim);
    const int d0 = lane * VPL; /* this lane's values: d0 .. d0 + VPL - 1 */
    const bool live = d0 < head_dim, whole = head_dim % VPL == 0;
    float qv[VPL], o[VPL];
#pragma unroll
    for (int t = 0; t < VPL; t++) {
        qv[t] = d0 + t < head_dim ? pk_load_fresh<FRESH>(q + (size_t)h * head_dim + d0 + t) : 0.0f;
        o[t] = 0.0f;
    }
    if (rope.on) /* a lane's values are whole pairs: VPL and d0 are even */
#pragma unroll
        for (int t = 0; t + 1 < VPL; t += 2)
            if (d0 + t + 1 < head_dim) pk_rope_rotate(rope, (d0 + t) >> 1, last, qv[t], qv[t + 1]);
#pragma unroll
    for (int t = 0; t < VPL; t++) qv[t] *= scale;
    float m = -INFINITY, l = 0.0f;
    /* Warp w takes keys k0 + w, k0 + w + nw, ... in order, KEYS of them at a time: their keys
     * and values are loaded before the first is used, so that many memory round trips overlap
     * instead of following one another (with AHEAD, the next group's while this one is computed).
     * The group's scores are summed together (pk_warp_sum_group), the lanes holding key u's sum
     * exponentiate it, and the output is rescaled once a group rather than once a key. */
    constexpr int KEYS = PK_ATTN_KEYS(FMT);
    typedef pk_attn_group<FMT, VPL, KEYS> group;
    const int my_key = pk_group_key<KEYS>(lane);
    const int step = nw * KEYS;
    const unsigned head_off = (unsigned)(h * head_dim + d0);
    const typename group::where at = {r, k1,   nw,    (unsigned)dim, head_off, (unsigned)n_heads,
                                      h, live, whole, head_dim - d0, my_key};
    group next;
    int slot_p = (int)((k0 + warp) % r.capacity); /* p's */
    if (AHEAD && k0 + warp <= k1) next.load(at, k0 + warp, slot_p);
    for (int64_t p = k0 + warp; p <= k1; p += step) {
        group cur;
        if (AHEAD)
            cur = next;
        else
            cur.load(at, p, slot_p);
        for (slot_p += step; slot_p >= r.capacity;) slot_p -= r.capacity;
        if (AHEAD && p + step <= k1) next.load(at, p + step, slot_p);
        float s[KEYS];
#pragma unroll
        for (int u = 0; u < KEYS; u++) {
            float kx[VPL];
            pk_kv_decode<FMT, VPL>(cur.k[u], kx);
            s[u] = 0.0f;
#pragma unroll
            for (int t = 0; t < VPL; t++) s[u] += qv[t] * kx[t];
        }
        float mine = pk_warp_sum_group<KEYS>(s, lane) * cur.k_scale;
        if (p + (int64_t)my_key * nw > k1) mine = -INFINITY; /* a key past the split's: weight 0 */
        float mn = mine;
#pragma unroll
        for (int o2 = 16; o2 >= 32 / KEYS; o2 /= 2) mn = fmaxf(mn, __shfl_xor_sync(0xffffffffu, mn, o2));
        mn = fmaxf(m, mn); /* key 0 of the group is live: finite */
        const float f = expf(m - mn), e_mine = expf(mine - mn);
        float sum_e = e_mine; /* over the group's keys: the lanes holding different keys */
#pragma unroll
        for (int o2 = 16; o2 >= 32 / KEYS; o2 /= 2) sum_e += __shfl_xor_sync(0xffffffffu, sum_e, o2);
#pragma unroll
        for (int t = 0; t < VPL; t++) o[t] *= f;
        const float ev_mine = e_mine * cur.v_scale; /* the weight of key my_key's value */
#pragma unroll
        for (int u = 0; u < KEYS; u++) {
            const float ev = __shfl_sync(0xffffffffu, ev_mine, pk_group_lane<KEYS>(u));
            float vx[VPL];
            pk_kv_decode<FMT, VPL>(cur.v[u], vx);
#pragma unroll
            for (int t = 0; t < VPL; t++) o[t] += ev * vx[t];
        }
        l = l * f + sum_e;
        m = mn;
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int t = 0; t < VPL; t++)
        if (d0 + t < head_dim) wo[warp][d0 + t] = o[t];
    __syncthreads();
    const size_t head = (size_t)row * n_heads + h;
    /* this (head, row)'s splits with keys: this one and those after it up to the newest key */
    const int working = split + 1 + (int)((last - k1 + span - 1) / span);
    float mx = -INFINITY;
    for (int w = 0; w < nw; w++) mx = fmaxf(mx, wm[w]);
    /* one split with keys: the output itself */
    float *dst = working > 1 ? part + (head * n_splits + split) * (head_dim + 2) : out + head * head_dim;
    for (int d = threadIdx.x; d < head_dim + 2; d += blockDim.x) {
        float acc = 0.0f, sum = 0.0f;
        for (int w = 0; w < nw; w++) {
            float f = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - mx);
            sum += wl[w] * f;
            if (d < head_dim) acc += wo[w][d] * f;
        }
        if (working > 1)
            dst[d] = d < head_dim ? acc : d == head_dim ? mx : sum;
        else if (d < head_dim)
            dst[d] = acc / sum; /* sum >= 1: the split holds the newest key */
    }
    return working == 1 ||
           pk_attn_merge_last(part + head * n_splits * (head_dim + 2), working, head_dim, &tickets[head],
                              out + head * head_dim);
}

#endif
