#if defined(TR_FP64) && !defined(TR_K1_NO_FP64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double tr_k1_acc;
#define TR_K1_TINY 1e-30
#else
typedef float tr_k1_acc;
#define TR_K1_TINY 1e-30f
#endif
#define TR_K1_WG 256
/* The elementwise kernels below take 4 values per work-item (tr__cl_k1_launch4): a float4 where the offsets allow. */
#define TR_V4(off) ((((off) & 3) == 0) && i + 3 < n)
float tr_round1(float v, int fdt);
/* y = a + b, rounded to the forward precision fdt (tr_round1; 0: float32, as is) */
__kernel void tr_k_add(ulong n, __global const float *a, ulong a_off, __global const float *b, ulong b_off, __global float *y, ulong y_off, int fdt) {
    size_t i = 4 * get_global_id(0), e;
    if (i >= n) return;
    a += a_off; b += b_off; y += y_off;
    if (TR_V4(a_off | b_off | y_off)) {
        const float4 v = *(__global const float4 *)(a + i) + *(__global const float4 *)(b + i);
        *(__global float4 *)(y + i) = (float4)(tr_round1(v.s0, fdt), tr_round1(v.s1, fdt), tr_round1(v.s2, fdt), tr_round1(v.s3, fdt));
    } else
        for (e = i; e < i + 4 && e < n; e++) y[e] = tr_round1(a[e] + b[e], fdt);
}
__kernel void tr_k_adam_atan2(ulong n, __global float *p, ulong p_off, __global const float *g, ulong g_off, __global float *m, ulong m_off,
                              __global float *v, ulong v_off, float decay, float step, float sbc2, float c1, float c2) {
    size_t i = get_global_id(0);
    float gi, pi, mi, vi;
    if (i >= n) return;
    p += p_off; g += g_off; m += m_off; v += v_off;
    gi = g[i];
    pi = p[i] * decay;
    mi = m[i] + c1 * (gi - m[i]);
    vi = v[i] + c2 * (gi * gi - v[i]);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step * atan2(mi, sqrt(vi) / sbc2);
}
__kernel void tr_k_ema(ulong n, __global float *sh, ulong sh_off, __global const float *p, ulong p_off, float omd, float decay) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    sh += sh_off; p += p_off;
    sh[i] = omd * p[i] + decay * sh[i];
}
/* x[0..n) rounded in place to bfloat16 (fdt 1) or float16 (fdt 2) values, to nearest even, as the host's
   tr__round_ref: NaN stays NaN (quiet), beyond the range is infinite. Integer arithmetic, so no device
   extension is needed. */
float tr_round1(float v, int fdt) {
    uint u = as_uint(v), a = u & 0x7fffffffu, r;
    if (fdt != 1 && fdt != 2) return v;
    if (a > 0x7f800000u) r = (u | 0x00400000u) & (fdt == 1 ? 0xffff0000u : 0xffffe000u);
    else if (fdt == 1) r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    else if (a >= 0x477ff000u) r = (u & 0x80000000u) | 0x7f800000u; /* >= 65520 rounds past 65504 */
    else if (a >= 0x38800000u) r = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u; /* normal: 10 mantissa bits */
    else r = (u & 0x80000000u) | as_uint(rint(as_float(a) * 16777216.0f) * 5.9604644775390625e-8f); /* subnormal: steps of 2^-24 */
    return as_float(r);
}
/* The 16-bit tape (the host's tr__half_ref): tr_half1 is x rounded to bfloat16 (fdt 1) or float16 (fdt 2) as its 16
   bits, tr_unhalf1 the value back. Integer arithmetic (no cl_khr_fp16 needed). */
ushort tr_half1(float x, int fdt) {
    uint u = as_uint(tr_round1(x, fdt)), a, s;
    if (fdt == 1) return (ushort)(u >> 16);
    a = u & 0x7fffffffu; s = (u >> 16) & 0x8000u;
    if (a >= 0x7f800000u) return (ushort)(s | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));
    if (a >= 0x38800000u) return (ushort)(s | ((a - 0x38000000u) >> 13));
    return (ushort)(s | (uint)(as_float(a) * 16777216.0f)); /* exact: a multiple of 2^-24 below 2^-14 */
}
float tr_unhalf1(ushort h, int fdt) {
    uint u = h, a = u & 0x7fffu, s = (u & 0x8000u) << 16;
    if (fdt == 1) return as_float(u << 16);
    if (a >= 0x7c00u) return as_float(s | 0x7f800000u | ((a & 0x3ffu) << 13));
    if (a >= 0x400u) return as_float(s | ((a << 13) + 0x38000000u));
    return as_float(s | as_uint((float)a * 5.9604644775390625e-8f)); /* subnormal: a steps of 2^-24 */
}
static inline float4 tr_unhalf4(ushort4 h, int fdt) { return (float4)(tr_unhalf1(h.s0, fdt), tr_unhalf1(h.s1, fdt), tr_unhalf1(h.s2, fdt), tr_unhalf1(h.s3, fdt)); }
static inline ushort4 tr_half4(float4 v, int fdt) { return (ushort4)(tr_half1(v.s0, fdt), tr_half1(v.s1, fdt), tr_half1(v.s2, fdt), tr_half1(v.s3, fdt)); }
static inline float4 tr_round4(float4 v, int fdt) { return (float4)(tr_round1(v.s0, fdt), tr_round1(v.s1, fdt), tr_round1(v.s2, fdt), tr_round1(v.s3, fdt)); }
/* unpack 0 stores x[i] as its 16 bits in h, unpack 1 loads them back; h_off counts floats (two values each) */
__kernel void tr_k_half(ulong n, __global float *x, ulong x_off, __global ushort *h, ulong h_off, int fdt, int unpack) {
    size_t i = 4 * get_global_id(0), e;
    if (i >= n) return;
    x += x_off; h += 2 * h_off;
    if (TR_V4(x_off | 2 * h_off)) {
        if (unpack) {
            ushort4 v = *(__global ushort4 *)(h + i);
            *(__global float4 *)(x + i) = (float4)(tr_unhalf1(v.s0, fdt), tr_unhalf1(v.s1, fdt), tr_unhalf1(v.s2, fdt), tr_unhalf1(v.s3, fdt));
        } else {
            float4 v = *(__global float4 *)(x + i);
            *(__global ushort4 *)(h + i) = (ushort4)(tr_half1(v.s0, fdt), tr_half1(v.s1, fdt), tr_half1(v.s2, fdt), tr_half1(v.s3, fdt));
        }
    } else
        for (e = i; e < i + 4 && e < n; e++) {
            if (unpack) x[e] = tr_unhalf1(h[e], fdt);
            else h[e] = tr_half1(x[e], fdt);
        }
}
/* Element e of p from offset off (in floats): a float, or (is16) the 16-bit value of fdt there, widened; stored back so
   by tr_k_st16 (v a value of fdt already, or fp32) */
static inline float tr_k_ld16(__global const float *p, ulong off, size_t e, int is16, int fdt) {
    return is16 ? tr_unhalf1(((__global const ushort *)p)[2 * off + e], fdt) : p[off + e];
}
static inline void tr_k_st16(__global float *p, ulong off, size_t e, int is16, int fdt, float v) {
    if (is16) ((__global ushort *)p)[2 * off + e] = tr_half1(v, fdt);
    else p[off + e] = v;
}
/* Elements e .. e + 3 (e a multiple of 4, the run aligned for a vector: tr_k_al4) as tr_k_ld16 / tr_k_st16 take one
   (tr_k_st4 rounds v to fdt, as tr_k_st16's callers do) */
/* tr_k_ld4 in two steps (tr_k_load4, then tr_k_widen4), for a kernel to issue all its loads before the conversions:
   those branch on fdt, and a load behind such a branch waits for the values before it (on an H200 the norms with
   16-bit operands ran 20-40% faster with their loads first) */
typedef struct tr_k_raw4 {
  float4 f;
  ushort4 h;
} tr_k_raw4;
static inline tr_k_raw4 tr_k_load4(__global const float *p, ulong off, size_t e, const int is16) {
  tr_k_raw4 r;
  if (is16) r.h = *(__global const ushort4 *)((__global const ushort *)p + 2 * off + e), r.f = (float4)(0.0f);
  else r.f = *(__global const float4 *)(p + off + e), r.h = (ushort4)(0);
  return r;
}
static inline float4 tr_k_widen4(tr_k_raw4 r, const int is16, int fdt) { return is16 ? tr_unhalf4(r.h, fdt) : r.f; }
static inline float4 tr_k_ld4(__global const float *p, ulong off, size_t e, const int is16, int fdt) { return tr_k_widen4(tr_k_load4(p, off, e, is16), is16, fdt); }
static inline void tr_k_st4(__global float *p, ulong off, size_t e, const int is16, int fdt, float4 v) {
  if (is16) *(__global ushort4 *)((__global ushort *)p + 2 * off + e) = tr_half4(v, fdt);
  else *(__global float4 *)(p + off + e) = tr_round4(v, fdt);
}
static inline int tr_k_al4(ulong off, int is16) { return ((is16 ? 2 * off : off) & 3) == 0; }
/* tr_k_add with any of a, b and y (x16 bits 1, 2, 4) holding 16-bit values of fdt (a 16-bit carry's; offsets in floats) */
__kernel void tr_k_add16(ulong n, __global const float *a, ulong a_off, __global const float *b, ulong b_off, __global float *y, ulong y_off, int fdt,
                         int x16) {
    size_t i = 4 * get_global_id(0), e;
    if (i + 3 < n && tr_k_al4(a_off, x16 & 1) && tr_k_al4(b_off, x16 & 2) && tr_k_al4(y_off, x16 & 4)) {
        tr_k_st4(y, y_off, i, x16 & 4, fdt, tr_k_ld4(a, a_off, i, x16 & 1, fdt) + tr_k_ld4(b, b_off, i, x16 & 2, fdt));
        return;
    }
    for (e = i; e < i + 4 && e < n; e++) {
        float v = tr_k_ld16(a, a_off, e, x16 & 1, fdt) + tr_k_ld16(b, b_off, e, x16 & 2, fdt);
        if (x16 & 4) ((__global ushort *)y)[2 * y_off + e] = tr_half1(v, fdt);
        else y[y_off + e] = tr_round1(v, fdt);
    }
}
__kernel void tr_k_scale(ulong n, __global float *x, ulong x_off, float a) {
    size_t i = get_global_id(0);
    if (i < n) x[x_off + i] *= a;
}
__kernel void tr_k_round(ulong n, __global float *x, ulong x_off, int fdt) {
    size_t i = 4 * get_global_id(0), e;
    if (i >= n) return;
    x += x_off;
    if (TR_V4(x_off)) {
        float4 v = *(__global float4 *)(x + i);
        *(__global float4 *)(x + i) = (float4)(tr_round1(v.s0, fdt), tr_round1(v.s1, fdt), tr_round1(v.s2, fdt), tr_round1(v.s3, fdt));
    } else
        for (e = i; e < i + 4 && e < n; e++) x[e] = tr_round1(x[e], fdt);
}
/* flag[0] = 1 when any of x[0..n) is NaN or infinite; a grid-stride loop, and every writer writes 1. */
__kernel void tr_k_nonfinite(ulong n, __global const float *x, ulong x_off, __global int *flag, ulong f_off) {
    size_t i = get_global_id(0), step = get_global_size(0);
    int bad = 0;
    x += x_off;
    for (; i < n; i += step) bad |= !isfinite(x[i]);
    if (bad) flag[f_off] = 1;
}
/* silu(x) in fp32, as the host's tr__silu */
static inline float tr_silu1(float x) { return x / (1.0f + exp(-x)); }
/* fdt (bfloat16 1, float16 2): silu and the product each rounded, as the host's tr__swiglu_fwd_range */
float tr_swiglu1(float x, float up, int fdt) {
    return fdt ? tr_round1(tr_round1(tr_silu1(x), fdt) * up, fdt) : tr_silu1(x) * up;
}
/* 4 columns per work-item (tr__cl_swiglu_fwd) */
__kernel void tr_k_swiglu_fwd(long rows, long width, __global const float *g, ulong g_off, ulong gs, __global float *o, ulong o_off, ulong os, int fdt) {
    long j = 4 * get_global_id(0), r = get_global_id(1), e;
    const ulong go = g_off + (size_t)r * gs, oo = o_off + (size_t)r * os;
    if (j >= width || r >= rows) return;
    g += go; o += oo;
    if (((go | oo | (ulong)width) & 3) == 0 && j + 3 < width) {
        const float4 x = *(__global const float4 *)(g + j), u = *(__global const float4 *)(g + j + width);
        *(__global float4 *)(o + j) = (float4)(tr_swiglu1(x.s0, u.s0, fdt), tr_swiglu1(x.s1, u.s1, fdt), tr_swiglu1(x.s2, u.s2, fdt), tr_swiglu1(x.s3, u.s3, fdt));
    } else
        for (e = j; e < j + 4 && e < width; e++) o[e] = tr_swiglu1(g[e], g[e + width], fdt);
}
/* dg (gate, up halves) of one value: d * up * silu'(x), d * silu(x) */
float2 tr_swiglu_bwd1(float x, float up, float d) {
    const float sg = 1.0f / (1.0f + exp(-x));
    return (float2)(d * up * (sg * (1.0f + x * (1.0f - sg))), d * (x * sg));
}
/* 4 columns per work-item (tr__cl_swiglu_bwd) */
__kernel void tr_k_swiglu_bwd(long rows, long width, __global const float *g, ulong g_off, ulong gs, __global const float *da, ulong da_off, ulong das,
                              __global float *dg, ulong dg_off, int fdt) {
    long j = 4 * get_global_id(0), r = get_global_id(1), e;
    const ulong go = g_off + (size_t)r * gs, ao = da_off + (size_t)r * das, oo = dg_off + (size_t)r * gs;
    if (j >= width || r >= rows) return;
    g += go; da += ao; dg += oo;
    if (((go | ao | oo | (ulong)width) & 3) == 0 && j + 3 < width) {
        const float4 x = *(__global const float4 *)(g + j), u = *(__global const float4 *)(g + j + width), d = *(__global const float4 *)(da + j);
        const float2 v0 = tr_swiglu_bwd1(x.s0, u.s0, d.s0), v1 = tr_swiglu_bwd1(x.s1, u.s1, d.s1), v2 = tr_swiglu_bwd1(x.s2, u.s2, d.s2),
                     v3 = tr_swiglu_bwd1(x.s3, u.s3, d.s3);
        *(__global float4 *)(dg + j) = (float4)(tr_round1(v0.s0, fdt), tr_round1(v1.s0, fdt), tr_round1(v2.s0, fdt), tr_round1(v3.s0, fdt));
        *(__global float4 *)(dg + j + width) = (float4)(tr_round1(v0.s1, fdt), tr_round1(v1.s1, fdt), tr_round1(v2.s1, fdt), tr_round1(v3.s1, fdt));
    } else
        for (e = j; e < j + 4 && e < width; e++) {
            const float2 v = tr_swiglu_bwd1(g[e], g[e + width], da[e]);
            dg[e] = tr_round1(v.s0, fdt), dg[e + width] = tr_round1(v.s1, fdt);
        }
}
/* q16: qkv holds 16-bit values of fdt (tr_k_rope16: a tensor-core device's 16-bit record; qkv_off in floats, two
   values each); a constant in each kernel, so that the loads are plain */
static inline void tr_rope1(long rows, int S, int H, int hd, __global float *qkv, ulong qkv_off, __global const float *cs, ulong cs_off,
                            __global const float *sn, ulong sn_off, float sgn, int fdt, const int q16) {
    int hf = hd / 2, i = get_global_id(0), j, h, qk, pos;
    long r = get_global_id(1);
    size_t v;
    float x1, x2;
    if (i >= 2 * H * hf || r >= rows) return;
    j = i % hf; h = (i / hf) % H; qk = i / (hf * H);
    pos = (int)(r % S);
    cs += cs_off + (size_t)pos * hd; sn += sn_off + (size_t)pos * hd;
    v = (size_t)r * 3 * H * hd + (size_t)qk * H * hd + (size_t)h * hd;
    x1 = tr_k_ld16(qkv, qkv_off, v + j, q16, fdt); x2 = tr_k_ld16(qkv, qkv_off, v + j + hf, q16, fdt);
    tr_k_st16(qkv, qkv_off, v + j, q16, fdt, tr_round1(x1 * cs[j] - sgn * x2 * sn[j], fdt));
    tr_k_st16(qkv, qkv_off, v + j + hf, q16, fdt, tr_round1(x2 * cs[j + hf] + sgn * x1 * sn[j + hf], fdt));
}
/* The same, four pairs j .. j + 3 a work-item (hd / 2 a multiple of 4; qkv 8-byte aligned when 16-bit, else as cos
   and sin, 16-byte): one vector load of each run, the same arithmetic on each element */
static inline void tr_rope4(long rows, int S, int H, int hd, __global float *qkv, ulong qkv_off, __global const float *cs, ulong cs_off,
                            __global const float *sn, ulong sn_off, float sgn, int fdt, const int q16) {
  const int hf = hd / 2, i = 4 * get_global_id(0), j = i % hf, h = (i / hf) % H, qk = i / (hf * H);
  const long r = get_global_id(1);
  float4 x1, x2, c1, c2, s1, s2;
  size_t v;
  if (i >= 2 * H * hf || r >= rows) return;
  cs += cs_off + (size_t)(r % S) * hd + j, sn += sn_off + (size_t)(r % S) * hd + j;
  c1 = *(__global const float4 *)cs, c2 = *(__global const float4 *)(cs + hf), s1 = *(__global const float4 *)sn, s2 = *(__global const float4 *)(sn + hf);
  v = (size_t)r * 3 * H * hd + (size_t)qk * H * hd + (size_t)h * hd + j;
  {
    const tr_k_raw4 r1 = tr_k_load4(qkv, qkv_off, v, q16), r2 = tr_k_load4(qkv, qkv_off, v + hf, q16); /* (both loads first) */
    x1 = tr_k_widen4(r1, q16, fdt), x2 = tr_k_widen4(r2, q16, fdt);
  }
  tr_k_st4(qkv, qkv_off, v, q16, fdt, x1 * c1 - sgn * x2 * s1);
  tr_k_st4(qkv, qkv_off, v + hf, q16, fdt, x2 * c2 + sgn * x1 * s2);
}
/* tr_k_rope[16][_x4]: the one-pair and four-pair kernels, for an fp32 and a 16-bit qkv */
#define TR_ROPE_K(NAME, FN, Q16)                                                                                                       \
    __kernel void NAME(long rows, int S, int H, int hd, __global float *qkv, ulong qkv_off, __global const float *cs, ulong cs_off,     \
                       __global const float *sn, ulong sn_off, float sgn, int fdt) {                                                  \
        FN(rows, S, H, hd, qkv, qkv_off, cs, cs_off, sn, sn_off, sgn, fdt, Q16);                                                       \
    }
TR_ROPE_K(tr_k_rope, tr_rope1, 0)
TR_ROPE_K(tr_k_rope16, tr_rope1, 1)
TR_ROPE_K(tr_k_rope_x4, tr_rope4, 0)
TR_ROPE_K(tr_k_rope16_x4, tr_rope4, 1)
/* h16 (bfloat16 1, float16 2; 0: fp32 as is): zh and zl hold 16-bit values (a 16-bit carry), hi and li rounded to them */
__kernel void tr_k_refill(int B, int S, int D, __global const int *halted, ulong halted_off, __global const float *hi, ulong hi_off,
                          __global const float *li, ulong li_off, __global float *zh, ulong zh_off, __global float *zl, ulong zl_off, int h16) {
    int i = get_global_id(0), b = get_global_id(1);
    size_t o;
    if (i >= S * D || b >= B) return;
    halted += halted_off;
    if (!halted[b]) return;
    o = (size_t)b * S * D + i;
    if (h16) {
        ((__global ushort *)zh)[2 * zh_off + o] = tr_half1(hi[hi_off + i % D], h16);
        ((__global ushort *)zl)[2 * zl_off + o] = tr_half1(li[li_off + i % D], h16);
        return;
    }
    zh[zh_off + o] = hi[hi_off + i % D];
    zl[zl_off + o] = li[li_off + i % D];
}
/* fdt (bfloat16 1, float16 2): wt and wp come rounded; the puzzle row and each step are rounded, as the host's; x16: x
   holds 16-bit values of fdt (a 16-bit carry) */
__kernel void tr_k_embed_fwd(int B, int S, int L, int Lp, int D, int Dp, float scale, int has_pos, int fdt, __global const float *wt, ulong wt_off,
                             __global const float *wp, ulong wp_off, __global const float *pe, ulong pe_off, __global const int *in, ulong in_off,
                             __global const int *pid, ulong pid_off, __global float *x, ulong x_off, int x16) {
    int j = get_global_id(0), bs = get_global_id(1), b = bs / S, s = bs % S, k;
    float v;
    if (j >= D || b >= B) return;
    if (s < Lp) {
        k = s * D + j;
        v = tr_round1(k < Dp ? pe[pe_off + (size_t)pid[pid_off + b] * Dp + k] : 0.0f, fdt);
    } else
        v = wt[wt_off + (size_t)in[in_off + (size_t)b * L + s - Lp] * D + j];
    if (has_pos) v = tr_round1(0.707106781f * tr_round1(v + wp[wp_off + (size_t)s * D + j], fdt), fdt);
    if (x16) ((__global ushort *)x)[2 * x_off + (size_t)bs * D + j] = tr_half1(v * scale, fdt);
    else x[x_off + (size_t)bs * D + j] = tr_round1(v * scale, fdt);
}
tr_k1_acc tr_k1_wg_sum(__local tr_k1_acc *sh, tr_k1_acc v) {
    int lid = get_local_id(0), s;
    tr_k1_acc t;
    sh[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) sh[lid] += sh[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    t = sh[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return t;
}
/* The norms and their backward round what they write to the forward precision fdt (0: float32, as is); with fdt the
   residual sum x + add is rounded first, as the reference forms it in that precision (the caller's add is a
   product's output, already of the precision). */
/* The row norms, each operand fp32 or 16-bit (x16 bits 1, 2, 4: x, add, out; the backward's dy, y, dx; 16 bits in a
   tensor-core device's 16-bit record): the fp32 arithmetic on the widened values, the residual sum formed again in the
   second pass rather than stored (out may alias x, or hold 16 bits). A kernel per combination, x16 a constant in each
   (tr_k_rms_rows_fwd16_0 all fp32), so that every load is a plain one. */
static inline void tr_rms_rows_fwd16(int D, float eps, int has_add, __global const float *x, ulong x_off, __global const float *ad, ulong ad_off,
                                     __global float *o, ulong o_off, __global float *rstd, ulong rstd_off, int fdt, __local tr_k1_acc *sh,
                                     const int x16) {
    size_t r = get_group_id(0), e;
    int j, lid = get_local_id(0), n = get_local_size(0);
    tr_k1_acc ss = 0;
    float inv, v;
    for (j = lid; j < D; j += n) {
        e = r * D + j;
        v = tr_k_ld16(x, x_off, e, x16 & 1, fdt);
        if (has_add) v = tr_round1(v + tr_k_ld16(ad, ad_off, e, x16 & 2, fdt), fdt);
        ss += (tr_k1_acc)v * v;
    }
    ss = tr_k1_wg_sum(sh, ss);
    inv = (float)((tr_k1_acc)1 / sqrt(ss / D + eps));
    if (lid == 0) rstd[rstd_off + r] = inv;
    for (j = lid; j < D; j += n) {
        e = r * D + j;
        v = tr_k_ld16(x, x_off, e, x16 & 1, fdt);
        if (has_add) v = tr_round1(v + tr_k_ld16(ad, ad_off, e, x16 & 2, fdt), fdt);
        tr_k_st16(o, o_off, e, x16 & 4, fdt, tr_round1(v * inv, fdt));
    }
}
static inline void tr_rms_rows_bwd16(int D, __global const float *dy, ulong dy_off, __global const float *y, ulong y_off, __global const float *rstd,
                                     ulong rstd_off, __global float *dx, ulong dx_off, int fdt, __local tr_k1_acc *sh, const int x16) {
    size_t r = get_group_id(0), e;
    int j, lid = get_local_id(0), n = get_local_size(0);
    tr_k1_acc dot = 0;
    float mean, rs = rstd[rstd_off + r];
    for (j = lid; j < D; j += n) e = r * D + j, dot += (tr_k1_acc)tr_k_ld16(dy, dy_off, e, x16 & 1, fdt) * tr_k_ld16(y, y_off, e, x16 & 2, fdt);
    dot = tr_k1_wg_sum(sh, dot);
    mean = (float)(dot / D);
    for (j = lid; j < D; j += n) {
        e = r * D + j;
        tr_k_st16(dx, dx_off, e, x16 & 4, fdt, tr_round1(rs * (tr_k_ld16(dy, dy_off, e, x16 & 1, fdt) - tr_k_ld16(y, y_off, e, x16 & 2, fdt) * mean), fdt));
    }
}
/* The same, 8 rows a work-group of 32 x 8 (D a multiple of 128, at most 1024; operands aligned for 4-value loads): each
   row's 32 work-items hold its D / 32 values in registers from a single read, four contiguous values a load, and sum
   them in a 32-way tree. On an H200 at trm-sudoku-att's shapes (37248 x 512) 119-124 -> 90 us a call. */
#define TR_RMSW_NV 8 /* (four-value runs a work-item, D / 128, at most) */
/* the sum over a row's 32 work-items (sh: 8 x 32), on each of them */
static inline tr_k1_acc tr_rmsw_sum(__local tr_k1_acc *sh, tr_k1_acc v) {
  const int l = get_local_id(0), base = 32 * get_local_id(1);
  int s;
  sh[base + l] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (s = 16; s > 0; s >>= 1) {
    if (l < s) sh[base + l] += sh[base + l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  v = sh[base];
  barrier(CLK_LOCAL_MEM_FENCE);
  return v;
}
static inline void tr_rms_rows16w(int bwd, long rows, int D, float eps, int has_add, __global const float *a, ulong a_off, __global const float *b,
                                  ulong b_off, __global float *o, ulong o_off, __global float *rstd, ulong rstd_off, int fdt,
                                  __local tr_k1_acc *sh, const int x16) {
  const long r = get_global_id(1);
  const int l = get_local_id(0), nv = D / 128, in = r < rows;
  const size_t base = (size_t)(in ? r : 0) * D + 4 * l;
  float4 v[TR_RMSW_NV], w[TR_RMSW_NV];
  tr_k_raw4 rv[TR_RMSW_NV], rw[TR_RMSW_NV];
  tr_k1_acc ss = 0;
  float inv = 0.0f, mean = 0.0f;
  int k;
#pragma unroll
  for (k = 0; k < TR_RMSW_NV; k++) /* the loads first (tr_k_load4) */
    if (k < nv) rv[k] = tr_k_load4(a, a_off, base + 128 * k, x16 & 1), rw[k] = tr_k_load4(b, b_off, bwd || has_add ? base + 128 * k : 0, x16 & 2);
#pragma unroll
  for (k = 0; k < TR_RMSW_NV; k++)
    if (k < nv) {
      v[k] = tr_k_widen4(rv[k], x16 & 1, fdt), w[k] = tr_k_widen4(rw[k], x16 & 2, fdt);
      if (bwd) /* dot(dy, y) */
        ss += (tr_k1_acc)v[k].s0 * w[k].s0 + (tr_k1_acc)v[k].s1 * w[k].s1 + (tr_k1_acc)v[k].s2 * w[k].s2 + (tr_k1_acc)v[k].s3 * w[k].s3;
      else {
        if (has_add) v[k] = tr_round4(v[k] + w[k], fdt);
        ss += (tr_k1_acc)v[k].s0 * v[k].s0 + (tr_k1_acc)v[k].s1 * v[k].s1 + (tr_k1_acc)v[k].s2 * v[k].s2 + (tr_k1_acc)v[k].s3 * v[k].s3;
      }
    }
  ss = tr_rmsw_sum(sh, in ? ss : 0);
  if (!in) return; /* (past the barriers) */
  if (bwd) mean = (float)(ss / D), inv = rstd[rstd_off + r];
  else {
    inv = (float)((tr_k1_acc)1 / sqrt(ss / D + eps));
    if (l == 0) rstd[rstd_off + r] = inv;
  }
#pragma unroll
  for (k = 0; k < TR_RMSW_NV; k++)
    if (k < nv) tr_k_st4(o, o_off, base + 128 * k, x16 & 4, fdt, bwd ? inv * (v[k] - w[k] * mean) : v[k] * inv);
}
#define TR_RMS16W_K(X)                                                                                                                     \
    __kernel __attribute__((reqd_work_group_size(32, 8, 1))) void tr_k_rms_rows_fwd16w_##X(long rows, int D, float eps, int has_add,     \
        __global const float *x, ulong x_off, __global const float *ad, ulong ad_off, __global float *o, ulong o_off, __global float *rstd, \
        ulong rstd_off, int fdt) {                                                                                                         \
        __local tr_k1_acc sh[256];                                                                                                         \
        tr_rms_rows16w(0, rows, D, eps, has_add, x, x_off, ad, ad_off, o, o_off, rstd, rstd_off, fdt, sh, X);                              \
    }                                                                                                                                      \
    __kernel __attribute__((reqd_work_group_size(32, 8, 1))) void tr_k_rms_rows_bwd16w_##X(long rows, int D, __global const float *dy,    \
        ulong dy_off, __global const float *y, ulong y_off, __global const float *rstd, ulong rstd_off, __global float *dx, ulong dx_off,  \
        int fdt) {                                                                                                                         \
        __local tr_k1_acc sh[256];                                                                                                         \
        tr_rms_rows16w(1, rows, D, 0.0f, 0, dy, dy_off, y, y_off, dx, dx_off, (__global float *)rstd, rstd_off, fdt, sh, X);               \
    }
/* (a kernel per combination: PoCL miscompiles barriers inside a switch over the combinations). TR_X16_EACH(K): K's
   instance for each combination of 16-bit operands, as the host names them from the operands' types (tr__cl_x16). */
#define TR_X16_EACH(K) K(0) K(1) K(2) K(3) K(4) K(5) K(6) K(7)
#define TR_RMS16_K(X)                                                                                                                        \
    __kernel void tr_k_rms_rows_fwd16_##X(int D, float eps, int has_add, __global const float *x, ulong x_off, __global const float *ad,       \
                                          ulong ad_off, __global float *o, ulong o_off, __global float *rstd, ulong rstd_off, int fdt) {    \
        __local tr_k1_acc sh[TR_K1_WG];                                                                                                      \
        tr_rms_rows_fwd16(D, eps, has_add, x, x_off, ad, ad_off, o, o_off, rstd, rstd_off, fdt, sh, X);                                     \
    }                                                                                                                                        \
    __kernel void tr_k_rms_rows_bwd16_##X(int D, __global const float *dy, ulong dy_off, __global const float *y, ulong y_off,                \
                                          __global const float *rstd, ulong rstd_off, __global float *dx, ulong dx_off, int fdt) {          \
        __local tr_k1_acc sh[TR_K1_WG];                                                                                                      \
        tr_rms_rows_bwd16(D, dy, dy_off, y, y_off, rstd, rstd_off, dx, dx_off, fdt, sh, X);                                                 \
    }
TR_X16_EACH(TR_RMS16_K)
TR_X16_EACH(TR_RMS16W_K)
/* The norm over the sequence axis (per batch b and channel j, over S rows D apart): a work-group of W channels x P
 parts (get_local_size; W x P <= 256), part p taking rows p, p + P, ..; each work-item keeps its first TR_COLS_R rows
 in registers, so that for S <= TR_COLS_R P every value is read once and written once (rows past those are read
 again). The parts' sums are added in part order, so the result does not depend on the schedule. Operands of either
 type (x16, as the row norms': a = x or dy, b = add or y, o = out or dx; tr_k_rms_cols_<fwd|bwd>_<x16>). */
#define TR_COLS_R 16
#define TR_COLS_MAXWG 256
static inline void tr_rms_cols(int bwd, int B, int S, int D, float eps, int has_add, __global const float *a, ulong a_off, __global const float *b,
                               ulong b_off, __global float *o, ulong o_off, __global float *rstd, ulong rstd_off, int fdt, __local tr_k1_acc *sh,
                               const int x16) {
    const int W = get_local_size(0), P = get_local_size(1), p = get_local_id(1), lx = get_local_id(0), j = get_group_id(0) * W + lx;
    const int bt = get_group_id(1), in = j < D && bt < B, rb = bwd || has_add; /* rb: b is read */
    const size_t base = (size_t)bt * S * D + j;
    float u[TR_COLS_R], w[TR_COLS_R], inv = 0.0f, mean = 0.0f;
    ushort ha[TR_COLS_R], hb[TR_COLS_R];
    tr_k1_acc acc = 0;
    int i, s, q;
    /* every load first, unconverted and without a branch (element 0 where there is none), then the conversions and
       rounding, which branch on fdt: loads behind those branches were issued one at a time (on an H200 a 16-bit
       operand's kernel took 126 us against 86 us for fp32 ones) */
#pragma unroll
    for (i = 0; i < TR_COLS_R; i++) {
        const size_t e = in && p + i * P < S ? base + (size_t)(p + i * P) * D : 0;
        if (x16 & 1) ha[i] = ((__global const ushort *)a)[2 * a_off + e];
        else u[i] = a[a_off + e];
        if (x16 & 2) hb[i] = ((__global const ushort *)b)[2 * b_off + (rb ? e : 0)];
        else w[i] = b[b_off + (rb ? e : 0)];
    }
#pragma unroll
    for (i = 0; i < TR_COLS_R; i++) {
        const int ok = in && p + i * P < S;
        if (x16 & 1) u[i] = tr_unhalf1(ha[i], fdt);
        if (x16 & 2) w[i] = tr_unhalf1(hb[i], fdt);
        if (!bwd) u[i] = has_add ? tr_round1(u[i] + w[i], fdt) : u[i];
        u[i] = ok ? u[i] : 0.0f, w[i] = ok ? w[i] : 0.0f;
        acc += bwd ? (tr_k1_acc)u[i] * w[i] : (tr_k1_acc)u[i] * u[i];
    }
#define TR_COLS_X(e) (has_add ? tr_round1(tr_k_ld16(a, a_off, e, x16 & 1, fdt) + tr_k_ld16(b, b_off, e, x16 & 2, fdt), fdt) : tr_k_ld16(a, a_off, e, x16 & 1, fdt))
    for (s = p + TR_COLS_R * P; in && s < S; s += P) { /* rows past the registers: read now and again below */
        const size_t e = base + (size_t)s * D;
        if (bwd) acc += (tr_k1_acc)tr_k_ld16(a, a_off, e, x16 & 1, fdt) * tr_k_ld16(b, b_off, e, x16 & 2, fdt);
        else {
            const float t = TR_COLS_X(e);
            acc += (tr_k1_acc)t * t;
        }
    }
    sh[p * W + lx] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (acc = 0, q = 0; q < P; q++) acc += sh[q * W + lx];
    if (!in) return; /* (past the barrier) */
    if (bwd) mean = (float)(acc / S), inv = rstd[rstd_off + (size_t)bt * D + j];
    else {
        inv = (float)((tr_k1_acc)1 / sqrt(acc / S + eps));
        if (p == 0) rstd[rstd_off + (size_t)bt * D + j] = inv;
    }
#pragma unroll
    for (i = 0; i < TR_COLS_R; i++)
        if (p + i * P < S) tr_k_st16(o, o_off, base + (size_t)(p + i * P) * D, x16 & 4, fdt, tr_round1(bwd ? inv * (u[i] - w[i] * mean) : u[i] * inv, fdt));
    for (s = p + TR_COLS_R * P; s < S; s += P) {
        const size_t e = base + (size_t)s * D;
        tr_k_st16(o, o_off, e, x16 & 4, fdt, tr_round1(bwd ? inv * (tr_k_ld16(a, a_off, e, x16 & 1, fdt) - tr_k_ld16(b, b_off, e, x16 & 2, fdt) * mean) : TR_COLS_X(e) * inv, fdt));
    }
#undef TR_COLS_X
}
#define TR_COLS16_K(X)                                                                                                                      \
    __kernel void tr_k_rms_cols_fwd_##X(int B, int S, int D, float eps, int has_add, __global const float *x, ulong x_off,                \
                                        __global const float *ad, ulong ad_off, __global float *o, ulong o_off, __global float *rstd,     \
                                        ulong rstd_off, int fdt) {                                                                        \
        __local tr_k1_acc sh[TR_COLS_MAXWG];                                                                                              \
        tr_rms_cols(0, B, S, D, eps, has_add, x, x_off, ad, ad_off, o, o_off, rstd, rstd_off, fdt, sh, X);                               \
    }                                                                                                                                     \
    __kernel void tr_k_rms_cols_bwd_##X(int B, int S, int D, __global const float *dy, ulong dy_off, __global const float *y, ulong y_off, \
                                        __global const float *rstd, ulong rstd_off, __global float *dx, ulong dx_off, int fdt) {          \
        __local tr_k1_acc sh[TR_COLS_MAXWG];                                                                                              \
        tr_rms_cols(1, B, S, D, 0.0f, 0, dy, dy_off, y, y_off, dx, dx_off, (__global float *)rstd, rstd_off, fdt, sh, X);                \
    }
TR_X16_EACH(TR_COLS16_K)
__kernel void tr_k_qhead_fwd(int S, int D, __global const float *zh, ulong zh_off, __global const float *wq, ulong wq_off,
                             __global const float *bq, ulong bq_off, __global float *q, ulong q_off) {
    __local tr_k1_acc sh[TR_K1_WG];
    int g = get_group_id(0), b = g / 2, jj = g % 2, k, lid = get_local_id(0), n = get_local_size(0);
    tr_k1_acc acc = 0;
    zh += zh_off + (size_t)b * S * D; wq += wq_off + (size_t)jj * D;
    for (k = lid; k < D; k += n) acc += (tr_k1_acc)zh[k] * wq[k];
    acc = tr_k1_wg_sum(sh, acc);
    if (lid == 0) q[q_off + g] = bq[bq_off + jj] + (float)acc;
}
#define TR_K1_SS(xv) ((xv) >= 0 ? (xv) + (tr_k1_acc)1 : (tr_k1_acc)1 / ((tr_k1_acc)1 - (xv) + TR_K1_TINY))
__kernel void tr_k_xent_count(int B, int L, __global const int *lab, ulong lab_off, __global float *rs, ulong rs_off) {
    int b = get_global_id(0), t, c = 0;
    if (b >= B) return;
    lab += lab_off + (size_t)b * L;
    for (t = 0; t < L; t++) c += lab[t] != -100;
    rs[rs_off + 4 * (size_t)b + 1] = (float)c;
}
__kernel void tr_k_xent_rows(long rows, int L, int V, int type, int tpr, float grad_div, int want_grad, __global const float *x, ulong x_off,
                             __global const int *lab, ulong lab_off, __global const float *rs, ulong rs_off, __global float *dl, ulong dl_off,
                             __global float *ts, ulong ts_off) {
    __local float shv[TR_K1_WG];
    __local int shi[TR_K1_WG];
    __local tr_k1_acc shs[TR_K1_WG];
    int lid = get_local_id(0), lane = lid % tpr, k, s, label = -100, am = 0, act;
    long row = (long)get_group_id(0) * (get_local_size(0) / tpr) + lid / tpr;
    float mx = -INFINITY, xl = 0;
    tr_k1_acc sum = 0, lp = 0, gs = 0, div = 1;
    act = row < rows;
    if (act) {
        label = lab[lab_off + row];
        x += x_off + (size_t)row * V;
        dl += dl_off + (size_t)row * V;
        div = max(rs[rs_off + 4 * (size_t)(row / L) + 1], 1.0f);
    }
    if (act && label != -100) {
        am = V;
        for (k = lane; k < V; k += tpr)
            if (am == V || x[k] > mx) mx = x[k], am = k;
    }
    shv[lid] = mx; shi[lid] = am;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (s = tpr / 2; s > 0; s >>= 1) {
        if (lane < s) {
            float v2 = shv[lid + s];
            int i2 = shi[lid + s];
            if (i2 < V && (shi[lid] >= V || v2 > shv[lid] || (v2 == shv[lid] && i2 < shi[lid]))) shv[lid] = v2, shi[lid] = i2;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mx = shv[lid - lane]; am = shi[lid - lane];
    if (act && label != -100) {
        if (label >= 0 && label < V) xl = x[label];
        for (k = lane; k < V; k += tpr) {
            tr_k1_acc xv = x[k];
            sum += type == 0 ? TR_K1_SS(xv) : exp(xv - (tr_k1_acc)mx);
        }
    }
    shs[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (s = tpr / 2; s > 0; s >>= 1) {
        if (lane < s) shs[lid] += shs[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    sum = shs[lid - lane];
    if (!act) return;
    if (label == -100) {
        if (want_grad)
            for (k = lane; k < V; k += tpr) dl[k] = 0.0f;
        if (lane == 0) ts[ts_off + 3 * (size_t)row] = ts[ts_off + 3 * (size_t)row + 1] = ts[ts_off + 3 * (size_t)row + 2] = 0.0f;
        return;
    }
    if (type == 0) lp = log(TR_K1_SS((tr_k1_acc)xl) / sum);
    else lp = (tr_k1_acc)xl - mx - log(sum);
    gs = (tr_k1_acc)1 / (div * (tr_k1_acc)grad_div);
    if (want_grad)
        for (k = lane; k < V; k += tpr) {
            tr_k1_acc xv = x[k], gk;
            if (type == 0) {
                tr_k1_acc sv = TR_K1_SS(xv), ds = xv >= 0 ? (tr_k1_acc)1 : sv * sv;
                gk = ds / sum - (k == label ? ds / sv : (tr_k1_acc)0);
            } else
                gk = exp(xv - (tr_k1_acc)mx) / sum - (k == label ? (tr_k1_acc)1 : (tr_k1_acc)0);
            dl[k] = (float)(gk * gs);
        }
    if (lane == 0) {
        float hi = (float)(-lp);
        ts[ts_off + 3 * (size_t)row] = hi;
        ts[ts_off + 3 * (size_t)row + 1] = (float)(-lp - hi);
        ts[ts_off + 3 * (size_t)row + 2] = am == label ? 1.0f : 0.0f;
    }
}
__kernel void tr_k_xent_reduce(int B, int L, __global const float *ts, ulong ts_off, __global float *rs, ulong rs_off) {
    int b = get_global_id(0), t;
    tr_k1_acc loss = 0, div;
    float c = 0;
    if (b >= B) return;
    ts += ts_off + 3 * (size_t)b * L; rs += rs_off + 4 * (size_t)b;
    for (t = 0; t < L; t++) {
        loss += (tr_k1_acc)ts[3 * t] + (tr_k1_acc)ts[3 * t + 1];
        c += ts[3 * t + 2];
    }
    div = max(rs[1], 1.0f);
    rs[0] = (float)(loss / div);
    rs[2] = c;
    rs[3] = 0.0f;
}
__kernel void tr_k_embed_bwd_pos(int B, int S, int D, float f, __global const float *dx, ulong dx_off, __global float *gp, ulong gp_off) {
    size_t i = get_global_id(0), n = (size_t)S * D;
    int b;
    float acc;
    if (i >= n) return;
    dx += dx_off + i; gp += gp_off + i;
    acc = *gp;
    for (b = 0; b < B; b++) acc += f * dx[(size_t)b * n];
    *gp = acc;
}
__kernel void tr_k_embed_bwd_prow(int B, int S, int D, int Dp, int Lp, float f, __global const float *dx, ulong dx_off, __global float *pr, ulong pr_off) {
    int k = get_global_id(0), b = get_global_id(1), s = k / D;
    if (k >= Dp || b >= B || s >= Lp || s >= S) return;
    pr[pr_off + (size_t)b * Dp + k] = f * dx[dx_off + ((size_t)b * S + s) * D + k % D];
}
__kernel void tr_k_embed_bwd_tok(int B, int S, int L, int Lp, int D, int V, int nchunk, float f, __global const float *dx, ulong dx_off,
                                 __global const int *in, ulong in_off, __global float *out, ulong out_off) {
    __local int tile[TR_K1_WG];
    int j = get_global_id(0), v = get_global_id(1), c = get_global_id(2), lid = get_local_id(0), n = get_local_size(0), u, m;
    long T = (long)B * L, t0 = T * c / nchunk, t1 = T * (c + 1) / nchunk, t;
    float acc = 0;
    __global float *dst = out + out_off + ((size_t)c * V + v) * D + j;
    if (nchunk == 1 && j < D) acc = *dst;
    dx += dx_off + j; in += in_off;
    for (t = t0; t < t1; t += n) {
        m = (int)min((long)n, t1 - t);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < m) tile[lid] = in[t + lid];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (j < D)
            for (u = 0; u < m; u++)
                if (tile[u] == v) {
                    long tt = t + u;
                    acc += f * dx[((size_t)(tt / L) * S + Lp + tt % L) * D];
                }
    }
    if (j < D) *dst = acc;
}
__kernel void tr_k_embed_bwd_tok_sum(int V, int D, int nchunk, __global const float *part, ulong part_off, __global float *gt, ulong gt_off) {
    size_t i = get_global_id(0), n = (size_t)V * D;
    int c;
    float acc;
    if (i >= n) return;
    part += part_off + i; gt += gt_off + i;
    acc = *gt;
    for (c = 0; c < nchunk; c++) acc += part[c * n];
    *gt = acc;
}
__kernel void tr_k_qhead_bwd_dz(int B, int S, int D, __global const float *dq, ulong dq_off, __global const float *wq, ulong wq_off, __global float *dz, ulong dz_off) {
    int k = get_global_id(0), b = get_global_id(1);
    float g0, g1, v;
    if (k >= D || b >= B) return;
    dq += dq_off + 2 * (size_t)b; wq += wq_off; dz += dz_off + (size_t)b * S * D + k;
    g0 = dq[0]; g1 = dq[1]; v = *dz;
    if (g0 != 0.0f) v += g0 * wq[k];
    if (g1 != 0.0f) v += g1 * wq[D + k];
    *dz = v;
}
__kernel void tr_k_qhead_bwd_w(int B, int S, int D, __global const float *dq, ulong dq_off, __global const float *zh, ulong zh_off,
                               __global float *gw, ulong gw_off, __global float *gb, ulong gb_off) {
    int k = get_global_id(0), jj = get_global_id(1), b;
    float acc;
    if (k > D || jj >= 2) return;
    dq += dq_off + jj; zh += zh_off + k;
    if (k == D) {
        acc = gb[gb_off + jj];
        for (b = 0; b < B; b++)
            if (dq[2 * b] != 0.0f) acc += dq[2 * b];
        gb[gb_off + jj] = acc;
        return;
    }
    gw += gw_off + (size_t)jj * D + k;
    acc = *gw;
    for (b = 0; b < B; b++) {
        float g = dq[2 * b];
        if (g != 0.0f) acc += g * zh[(size_t)b * S * D];
    }
    *gw = acc;
}
__kernel void tr_k_signsgd(int Dp, int ng, float decay, float lr, __global float *tab, ulong tab_off, __global const int *gid, ulong gid_off,
                           __global const int *gst, ulong gst_off, __global const int *ord, ulong ord_off, __global const float *pr, ulong pr_off) {
    int k = get_global_id(0), g = get_global_id(1), j, j1;
    float sum = 0, sg;
    __global float *row;
    if (k >= Dp || g >= ng) return;
    gst += gst_off; ord += ord_off; pr += pr_off + k;
    j1 = gst[g + 1];
    for (j = gst[g]; j < j1; j++) sum += pr[(size_t)ord[j] * Dp];
    sg = (float)((sum > 0) - (sum < 0));
    row = tab + tab_off + (size_t)gid[gid_off + g] * Dp + k;
    *row = *row * decay - lr * sg;
}
