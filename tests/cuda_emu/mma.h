/* cuda_emu: the warp matrix functions (nvcuda::wmma) the kernels use, in the one shape and type
 * they use: TF32 tiles of 16 x 8 (a) by 8 x 16 (b), accumulated in f32 (m16n16k8).
 *
 * A fragment's elements belong to lanes in an order of the emulation's own (the device's order
 * is opaque too: kernels may only apply the same operation to every element), chosen so that a
 * product needs no exchange between lanes (pk_share). Loads, stores and fills are
 * warp-collective and meet the warp, so a call from a partial warp stops the run. As the
 * tensor cores do, the product
 * reads only the 19 bits of a TF32 from each float (sign, exponent, 10 bits of mantissa): a
 * value not rounded with __float_to_tf32 first loses its low bits, here as there. Pointers
 * must be 32-byte aligned and ldm a multiple of 4 floats, as on the device. */
#ifndef PK_EMU_MMA_H
#define PK_EMU_MMA_H

#include "pk_emu_device.h"

#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
} // namespace precision
enum layout_t { mem_row_major, mem_col_major };

/* Which elements of its tile a lane's fragment holds, in an order of the emulation's own:
 * exactly those the lane's share of the product needs. Lane L computes row L / 2, columns
 * [8·(L % 2), 8·(L % 2) + 8) of the 16 x 16 result, so it holds that row of a (8 values), those
 * columns of b (8 x 8, k-major) and those 8 elements of the accumulator. */
template <class Use> struct pk_share;
template <> struct pk_share<matrix_a> {
    enum { N = 8 };
};
template <> struct pk_share<matrix_b> {
    enum { N = 64 };
};
template <> struct pk_share<accumulator> {
    enum { N = 8 };
};

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 8, "the emulation has the m16n16k8 shape only");
    enum { num_elements = pk_share<Use>::N };
    float x[num_elements];
};

/* The tile's (row, column) of element t of the running lane's fragment. */
template <class Use> static inline void pk_place(int t, int *r, int *c) {
    const int lane = pk_emu::lane_id();
    if (std::is_same<Use, matrix_b>::value)
        *r = t / 8, *c = 8 * (lane % 2) + t % 8;
    else if (std::is_same<Use, matrix_a>::value)
        *r = lane / 2, *c = t;
    else
        *r = lane / 2, *c = 8 * (lane % 2) + t;
}

/* Round to nearest, ties away from zero, to 10 bits of mantissa (cvt.rna.tf32.f32). */
static inline float __float_to_tf32(float v) {
    uint32_t u = __float_as_uint(v);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
    return __uint_as_float(u);
}

static inline float pk_tf32_bits(float v) { return __uint_as_float(__float_as_uint(v) & ~0x1fffu); }

/* Every lane of the warp must call: a missing one stops the run. */
static inline void pk_warp_meet(void) {
    int token = 0;
    pk_emu::shuffle(0xffffffffu, &token, sizeof token, 0, &token);
}

/* A warp-wide load or store: meets the warp and checks the pointer and stride. */
static inline void pk_warp_access(const void *p, unsigned ldm) {
    pk_warp_meet();
    if ((uintptr_t)p & 31) pk_emu::misuse("wmma: a matrix pointer that is not 32-byte aligned");
    if (ldm % 4) pk_emu::misuse("wmma: a leading dimension that is not a multiple of 4 floats");
}

template <class Layout> static inline size_t pk_offset(int r, int c, unsigned ldm) {
    return std::is_same<Layout, col_major>::value ? (size_t)c * ldm + r : (size_t)r * ldm + c;
}

template <class Use, int M, int N, int K, class T, class Layout>
static inline void fill_fragment(fragment<Use, M, N, K, T, Layout> &f, float v) {
    pk_warp_meet();
    for (int t = 0; t < f.num_elements; t++) f.x[t] = v;
}

template <class Use, int M, int N, int K, class T, class Layout>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout> &f, const float *p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load takes its layout");
    pk_warp_access(p, ldm);
    for (int t = 0; t < f.num_elements; t++) {
        int r, c;
        pk_place<Use>(t, &r, &c);
        f.x[t] = p[pk_offset<Layout>(r, c, ldm)];
    }
}

template <int M, int N, int K, class T>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm,
                                     layout_t layout) {
    pk_warp_access(p, ldm);
    for (int t = 0; t < f.num_elements; t++) {
        int r, c;
        pk_place<accumulator>(t, &r, &c);
        p[layout == mem_col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c] = f.x[t];
    }
}

/* d = a·b + c, the products of TF32 operands exact and summed in f32 in order of k. */
template <int M, int N, int K, class LA, class LB>
static inline void
mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, precision::tf32, LA> &a,
         const fragment<matrix_b, M, N, K, precision::tf32, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
    float ta[8], tb[64];
    for (int k = 0; k < 8; k++) ta[k] = pk_tf32_bits(a.x[k]);
    for (int t = 0; t < 64; t++) tb[t] = pk_tf32_bits(b.x[t]);
    for (int j = 0; j < 8; j++) {
        float s = c.x[j];
        for (int k = 0; k < 8; k++) s += ta[k] * tb[k * 8 + j];
        d.x[j] = s;
    }
}

} // namespace wmma
} // namespace nvcuda

#endif
