/* cpu_gemv_neon: the aarch64 twin of cpu_gemv.c's row loops (NEON is part of the baseline there,
 * so no detection beyond PP_CPU_SIMD=portable; see cpu_simd.h).
 *
 * The loops are cpu_gemv_rows.h's, on a pair of 4-float registers; this file supplies their
 * decoding. Quantized formats look their codes up in a per-group table already multiplied by
 * the group's scale, with the byte table lookup (tbl): a code c becomes the byte indices
 * 4c..4c+3 of its float in the table.
 *   NF2:  16 codes from one 32-bit word, code e at bits 2e; 4 scaled centroids, one register;
 *         each byte's 16 indices come from a constant table.
 *   INT4: 8 nibbles from one 32-bit word, low nibble first; (q − 8)·s as fma(q, s, −8s),
 *         exact before its one rounding, like the portable product.
 *   NF4:  8 nibbles, high nibble first; 16 scaled entries in four registers (tbl over 64 bytes).
 * NF2's activation transform is cpu_gemv_rows.h's too, and INT8 weights run cpu_gemv_int8.c's loop. */
#include "backend/cpu.h"

#if CPU_HAVE_NEON

#include "backend/cpu_vf8.h"
#include "io/quant.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

/* One in-register stage of the transform (distance 1 or 2 lanes): a lane in `upper` becomes its
 * partner's a − b, the others a + b with the partner above. */
INLINE float32x4_t fwht_stage(float32x4_t v, float32x4_t partner, uint32x4_t upper) {
    return vbslq_f32(upper, vsubq_f32(partner, v), vaddq_f32(v, partner));
}

/* Stages 1 and 2 in each half (lanes 1 0 3 2, then 2 3 0 1), stage 4 across the halves. */
INLINE vf8 fwht8(vf8 v) {
    const uint32x4_t odd = {0, ~0u, 0, ~0u}, high = {0, 0, ~0u, ~0u};
    float32x4_t h[2] = {v.lo, v.hi};
    for (int k = 0; k < 2; k++) {
        h[k] = fwht_stage(h[k], vrev64q_f32(h[k]), odd);
        h[k] = fwht_stage(h[k], vextq_f32(h[k], h[k], 2), high);
    }
    return (vf8){vaddq_f32(h[0], h[1]), vsubq_f32(h[0], h[1])};
}

/* Eight dense weights starting at element pointer p. */
INLINE vf8 dense8(pp_wformat fmt, const uint8_t *p) {
    if (fmt == PP_WF_F32) return vf8_load((const float *)p);
    if (fmt == PP_WF_BF16) return vf8_from_bf16((const uint16_t *)p);
    uint16x8_t h = vld1q_u16((const uint16_t *)p);
    return (vf8){vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))),
                 vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)))};
}

/* NF2: t[0] its scaled centroids; NF4: t[0..3] its 16 scaled entries; INT4: t[0] = s, t[1] = −8s. */
typedef struct group_tab {
    float32x4_t t[4];
} group_tab;

INLINE group_tab base_tab(const float *table16) {
    return (group_tab){{vld1q_f32(table16), vld1q_f32(table16 + 4), vld1q_f32(table16 + 8), vld1q_f32(table16 + 12)}};
}

INLINE group_tab make_tab(pp_wformat fmt, float s, const group_tab *base) {
    group_tab t;
    if (fmt == PP_WF_INT4) {
        t.t[0] = vdupq_n_f32(s), t.t[1] = vdupq_n_f32(-8.0f * s);
        return t;
    }
    for (int k = 0; k < (fmt == PP_WF_NF2 ? 1 : 4); k++) t.t[k] = vmulq_n_f32(base->t[k], s);
    return t;
}

/* NF2 and INT4 store f16 scales, converted here four at a time; NF4's nested absmax goes
 * through the reference, as does a count's last few. */
INLINE void group_scales(const pp_weight *w, pp_wformat fmt, int64_t g, int64_t count, float *out) {
    int64_t i = 0;
    if (fmt != PP_WF_NF4) {
        const uint16_t *h = (const uint16_t *)w->scales + g;
        for (; i + 4 <= count; i += 4) vst1q_f32(out + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h + i))));
    }
    if (i < count) pp_weight_group_scales(w, g + i, count - i, out + i);
}

/* The byte indices of four table floats from their codes (one per 32-bit lane). */
INLINE uint8x16_t float_bytes(uint32x4_t codes) {
    return vreinterpretq_u8_u32(vmlaq_n_u32(vdupq_n_u32(0x03020100u), codes, 0x04040404u));
}

/* Four codes (mask: their width) from the word v holds in every lane, shifted down by the lanes' shifts. */
INLINE uint32x4_t codes4(uint32x4_t v, int32x4_t down, uint32_t mask) {
    return vandq_u32(vshlq_u32(v, down), vdupq_n_u32(mask));
}

INLINE vf8 nibbles8(pp_wformat fmt, const uint8_t *p, const group_tab *t) {
    uint32_t u;
    memcpy(&u, p, 4);
    uint32x4_t v = vdupq_n_u32(u);
    if (fmt == PP_WF_INT4) {
        const int32x4_t lo = {0, -4, -8, -12}, hi = {-16, -20, -24, -28};
        return (vf8){vfmaq_f32(t->t[1], vcvtq_f32_u32(codes4(v, lo, 15)), t->t[0]),
                     vfmaq_f32(t->t[1], vcvtq_f32_u32(codes4(v, hi, 15)), t->t[0])};
    }
    const int32x4_t lo = {-4, 0, -12, -8}, hi = {-20, -16, -28, -24};
    const uint8x16x4_t table = {{vreinterpretq_u8_f32(t->t[0]), vreinterpretq_u8_f32(t->t[1]),
                                 vreinterpretq_u8_f32(t->t[2]), vreinterpretq_u8_f32(t->t[3])}};
    return (vf8){vreinterpretq_f32_u8(vqtbl4q_u8(table, float_bytes(codes4(v, lo, 15)))),
                 vreinterpretq_f32_u8(vqtbl4q_u8(table, float_bytes(codes4(v, hi, 15))))};
}

/* NF2: for each packed byte (four codes, the first in bits 0-1), the tbl indices of its four
 * floats in the one-register table: code c at lane L gives bytes 4c..4c+3 of lane L. A lookup
 * per byte replaces a shift, a mask and a multiply-add per four codes. */
#define NF2_LANE(b, lane) 4 * (((b) >> (2 * (lane))) & 3)
#define NF2_LANE_BYTES(b, lane) NF2_LANE(b, lane), NF2_LANE(b, lane) + 1, NF2_LANE(b, lane) + 2, NF2_LANE(b, lane) + 3
#define NF2_BYTE(b) {NF2_LANE_BYTES(b, 0), NF2_LANE_BYTES(b, 1), NF2_LANE_BYTES(b, 2), NF2_LANE_BYTES(b, 3)}
#define NF2_BYTE4(b) NF2_BYTE(b), NF2_BYTE(b + 1), NF2_BYTE(b + 2), NF2_BYTE(b + 3)
#define NF2_BYTE16(b) NF2_BYTE4(b), NF2_BYTE4(b + 4), NF2_BYTE4(b + 8), NF2_BYTE4(b + 12)
#define NF2_BYTE64(b) NF2_BYTE16(b), NF2_BYTE16(b + 16), NF2_BYTE16(b + 32), NF2_BYTE16(b + 48)
static const uint8_t nf2_tbl_index[256][16] = {NF2_BYTE64(0), NF2_BYTE64(64), NF2_BYTE64(128), NF2_BYTE64(192)};

/* The four NF2 weights of packed byte b. */
INLINE float32x4_t nf2_4(uint8x16_t table, uint32_t b) {
    return vreinterpretq_f32_u8(vqtbl1q_u8(table, vld1q_u8(nf2_tbl_index[b])));
}

INLINE void nf2_16(const group_tab *t, uint32_t u, vf8 out[2]) {
    uint8x16_t table = vreinterpretq_u8_f32(t->t[0]);
    out[0] = (vf8){nf2_4(table, u & 255), nf2_4(table, (u >> 8) & 255)};
    out[1] = (vf8){nf2_4(table, (u >> 16) & 255), nf2_4(table, u >> 24)};
}

#include "backend/cpu_gemv_rows.h"

int pp_cpu_gemv_neon_handles(const pp_weight *w) {
    return w->fmt == PP_WF_INT8 ? pp_cpu_gemv_int8_handles(w) : float_rows_handle(w);
}

void pp_cpu_gemv_rows_neon(const pp_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    if (w->fmt == PP_WF_INT8)
        pp_cpu_gemv_int8_rows_simd(w, x, n, y, r0, r1);
    else
        float_rows(w, x, n, y, r0, r1);
}

void pp_cpu_fwht_neon(float *v, int n) { simd_fwht(v, n); }

#endif
