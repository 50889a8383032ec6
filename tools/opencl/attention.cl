#ifndef TR_MMA_ONLY /* (the tensor-core program, TR_MMA_ONLY, has the tensor-core attention below alone) */
/* Flash attention, forward. Work-group (TD, BQ): row qi of a block of BQ queries, dj = its slice of the
 head dimension (d = dj + TD*c). Loops over blocks of BK keys with an online softmax; never stores S x S. */
#define TR_ATT_TD 16
/* x16 (bits 1, 2, 4: qkv, o, do) holds 16-bit values of fdt (a tensor-core device's 16-bit record): a constant in
 each kernel (the _h ones: qkv and o; do stays fp32), so that each load is a plain one. Offsets in values; lse, Dv and
 dqkv stay fp32. */
static inline float tr_att_ld(__global const float *p, long i, const int is16, int fdt) {
  return is16 ? tr_unhalf1(((__global const ushort *)p)[i], fdt) : p[i];
}
#define TR_ATT_AT(p, off, is16) ((is16) ? (__global float *)((__global ushort *)(p) + 2 * (off)) : (p) + (off))
#define TR_QLD(r, d) tr_att_ld(qkv, ((long)b * S + (r)) * ld + (long)h * hd + (d), x16 & 1, fdt)
static inline void tr_att_fwd(__global const float *qkv, __global float *o, __global float *lse, int S, int H, int hd,
           int nqb, int BK, __local float *Qs, __local float *Ks, __local float *Vs, __local float *Ps, const int NC, int fdt, const int x16) {
  const int dj = get_local_id(0), qi = get_local_id(1), BQ = get_local_size(1), NTH = TR_ATT_TD * BQ;
  const int tid = qi * TR_ATT_TD + dj, g = get_group_id(0), bh = g / nqb, q0 = (g - bh * nqb) * BQ;
  const int b = bh / H, h = bh - b * H, D = H * hd, sk = hd + 1, sp = BK + 1;
  const long ld = 3L * D;
  const float scale = 1.0f / sqrt((float)hd);
  float oa[16], m = -INFINITY, l = 0.0f, mx, al, ps, p;
  int e, i, j, d, c, k0, kn;
  for (c = 0; c < NC; c++) oa[c] = 0.0f;
  for (e = tid; e < BQ * hd; e += NTH) {
    i = e / hd, d = e - i * hd;
    Qs[i * sk + d] = q0 + i < S ? TR_QLD(q0 + i, d) : 0.0f;
  }
  for (k0 = 0; k0 < S; k0 += BK) {
    kn = min(BK, S - k0);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (e = tid; e < kn * hd; e += NTH) {
      j = e / hd, d = e - j * hd;
      Ks[j * sk + d] = TR_QLD(k0 + j, D + d);
      Vs[j * hd + d] = TR_QLD(k0 + j, 2 * D + d);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    { /* scores of keys dj + TD*n (n < 4: BK <= 64), q[d] read once for the four */
      float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, qd;
      for (d = 0; d < hd; d++) {
        qd = Qs[qi * sk + d];
        for (c = 0; c < 4; c++)
          if (dj + TR_ATT_TD * c < kn) s4[c] = fma(qd, Ks[(dj + TR_ATT_TD * c) * sk + d], s4[c]);
      }
      for (c = 0; c < 4; c++)
        if (dj + TR_ATT_TD * c < BK) Ps[qi * sp + dj + TR_ATT_TD * c] = dj + TR_ATT_TD * c < kn ? s4[c] * scale : -INFINITY;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    mx = m;
    for (j = 0; j < kn; j++) mx = fmax(mx, Ps[qi * sp + j]);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (j = dj; j < kn; j += TR_ATT_TD) Ps[qi * sp + j] = exp(Ps[qi * sp + j] - mx);
    barrier(CLK_LOCAL_MEM_FENCE);
    al = exp(m - mx);
    m = mx;
    ps = 0.0f;
    for (c = 0; c < NC; c++) oa[c] *= al;
    for (j = 0; j < kn; j++) {
      p = Ps[qi * sp + j];
      ps += p;
      for (c = 0; c < NC; c++) {
        d = dj + TR_ATT_TD * c;
        if (d < hd) oa[c] = fma(p, Vs[j * hd + d], oa[c]);
      }
    }
    l = l * al + ps;
  }
  if (q0 + qi < S) {
    const long orow = ((long)b * S + q0 + qi) * D + (long)h * hd;
    for (c = 0; c < NC; c++) {
      d = dj + TR_ATT_TD * c;
      if (d < hd) {
        if (x16 & 2) ((__global ushort *)o)[orow + d] = tr_half1(oa[c] / l, fdt);
        else o[orow + d] = tr_round1(oa[c] / l, fdt);
      }
    }
    if (dj == 0) lse[((long)b * H + h) * S + q0 + qi] = m + log(l);
  }
}
#define TR_ATT_FWD(NAME, NC, X16)                                                                                    \
  __kernel void NAME(__global const float *qkv, ulong qkv_off, __global float *o, ulong o_off, __global float *lse, \
           ulong lse_off, int S, int H, int hd, int nqb, int BK, __local float *Qs, __local float *Ks,  \
           __local float *Vs, __local float *Ps, int fdt) {                                              \
    tr_att_fwd(TR_ATT_AT(qkv, qkv_off, X16 & 1), TR_ATT_AT(o, o_off, X16 & 2), lse + lse_off, S, H, hd, nqb, BK, Qs, Ks, Vs, \
               Ps, NC, fdt, X16);                                                                                    \
  }
TR_ATT_FWD(tr_k_att_fwd64, 4, 0)
TR_ATT_FWD(tr_k_att_fwd256, 16, 0)
TR_ATT_FWD(tr_k_att_fwd64_h, 4, 3)
TR_ATT_FWD(tr_k_att_fwd256_h, 16, 3)
/* Dv[(b*H+h)*S+i] = dot(do_i, o_i) over the head's slice (_h: o in 16 bits). */
static inline void tr_att_dot(__global const float *o, __global const float *dO, __global float *Dv, int B, int S, int H, int hd, int fdt, const int x16) {
  const long r = get_global_id(0);
  long bh, i, base;
  float s = 0.0f;
  int d;
  if (r >= (long)B * H * S) return;
  bh = r / S, i = r - bh * S;
  base = ((bh / H) * S + i) * (long)H * hd + (bh % H) * (long)hd;
  if ((x16 & 2) && (hd & 3) == 0) /* (16-bit o: four values a load, as many loads as fp32's are bytes; the same sum) */
    for (d = 0; d < hd; d += 4) {
      const ushort4 h = vload4(0, (__global const ushort *)o + base + d);
      const float4 g = vload4(0, dO + base + d);
      s = fma(g.s0, tr_unhalf1(h.s0, fdt), s), s = fma(g.s1, tr_unhalf1(h.s1, fdt), s);
      s = fma(g.s2, tr_unhalf1(h.s2, fdt), s), s = fma(g.s3, tr_unhalf1(h.s3, fdt), s);
    }
  else
    for (d = 0; d < hd; d++) s = fma(dO[base + d], tr_att_ld(o, base + d, x16 & 2, fdt), s);
  Dv[r] = s;
}
__kernel void tr_k_att_dot(__global const float *o, ulong o_off, __global const float *dO, ulong dO_off,
             __global float *Dv, ulong Dv_off, int B, int S, int H, int hd, int fdt) {
  tr_att_dot(o + o_off, dO + dO_off, Dv + Dv_off, B, S, H, hd, fdt, 0);
}
__kernel void tr_k_att_dot_h(__global const float *o, ulong o_off, __global const float *dO, ulong dO_off,
             __global float *Dv, ulong Dv_off, int B, int S, int H, int hd, int fdt) {
  tr_att_dot(TR_ATT_AT(o, o_off, 1), dO + dO_off, Dv + Dv_off, B, S, H, hd, fdt, 2);
}
/* The same for a 16-bit o, 8 work-items a row (hd a multiple of 32; do 16-byte and o 8-byte aligned): hd / 8
   contiguous values each, four a load (adjacent work-items read adjacent runs), the 8 partial sums added in a tree.
   w16: do is also written rounded to fdt as 16-bit values into do16 (do's layout, 8-byte aligned; the offset in
   floats), the operand the tensor-core backward stages. */
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void tr_k_att_dot8_h(__global const float *o, ulong o_off, __global const float *dO,
             ulong dO_off, __global float *Dv, ulong Dv_off, int B, int S, int H, int hd, int fdt, __global float *do16, ulong do16_off,
             int w16) {
  __local float sh[256];
  const long r = get_global_id(0) >> 3;
  const int l = get_local_id(0), p = l & 7, n = hd / 8, in = r < (long)B * H * S;
  float s = 0.0f;
  int d, k;
  if (in) {
    const long bh = r / S, i = r - bh * S, base = ((bh / H) * S + i) * (long)H * hd + (bh % H) * (long)hd + (long)p * n;
    for (d = 0; d < n; d += 4) {
      const float4 g = *(__global const float4 *)(dO + dO_off + base + d);
      const float4 h = tr_unhalf4(*(__global const ushort4 *)((__global const ushort *)o + 2 * o_off + base + d), fdt);
      if (w16) *(__global ushort4 *)((__global ushort *)do16 + 2 * do16_off + base + d) = tr_half4(g, fdt);
      s = fma(g.s0, h.s0, s), s = fma(g.s1, h.s1, s), s = fma(g.s2, h.s2, s), s = fma(g.s3, h.s3, s);
    }
  }
  sh[l] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (k = 4; k > 0; k >>= 1) {
    if (p < k) sh[l] += sh[l + k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (in && p == 0) Dv[Dv_off + r] = sh[l];
}
/* Backward, dk and dv: work-group (TD, BKb) owns a block of keys (row kj, slice dj) and loops over query
 blocks of BQb rows, recomputing p = exp(q.k*scale - lse) and ds = p*(do.v - Dv). */
static inline void tr_att_dkdv(__global const float *qkv, __global const float *dO, __global const float *lse,
            __global const float *Dv, __global float *dqkv, int S, int H, int hd, int nkb, int BQb,
            __local float *Ks, __local float *Vs, __local float *Qs, __local float *Os,
            __local float *Ls, __local float *Ps, __local float *Ss, const int NC, int fdt, const int x16) {
  const int dj = get_local_id(0), kj = get_local_id(1), BKb = get_local_size(1), NTH = TR_ATT_TD * BKb;
  const int tid = kj * TR_ATT_TD + dj, g = get_group_id(0), bh = g / nkb, j0 = (g - bh * nkb) * BKb;
  const int b = bh / H, h = bh - b * H, D = H * hd, sk = hd + 1, sp = BKb + 1;
  const long ld = 3L * D, lrow = ((long)b * H + h) * S;
  const float scale = 1.0f / sqrt((float)hd);
  float dk[16], dv[16], p, ds;
  int e, i, j, d, c, i0, qn;
  for (c = 0; c < NC; c++) dk[c] = dv[c] = 0.0f;
  for (e = tid; e < BKb * hd; e += NTH) {
    j = e / hd, d = e - j * hd;
    Ks[j * sk + d] = j0 + j < S ? TR_QLD(j0 + j, D + d) : 0.0f;
    Vs[j * sk + d] = j0 + j < S ? TR_QLD(j0 + j, 2 * D + d) : 0.0f;
  }
  for (i0 = 0; i0 < S; i0 += BQb) {
    qn = min(BQb, S - i0);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (e = tid; e < qn * hd; e += NTH) {
      i = e / hd, d = e - i * hd;
      Qs[i * sk + d] = TR_QLD(i0 + i, d);
      Os[i * sk + d] = dO[((long)b * S + i0 + i) * D + (long)h * hd + d];
    }
    for (e = tid; e < qn; e += NTH) Ls[e] = lse[lrow + i0 + e], Ls[BQb + e] = Dv[lrow + i0 + e];
    barrier(CLK_LOCAL_MEM_FENCE);
    { /* queries dj + TD*n (n < 4: BQb <= 64); k[d], v[d] read once for the four */
      float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, p4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, kd, vd;
      for (d = 0; d < hd; d++) {
        kd = Ks[kj * sk + d], vd = Vs[kj * sk + d];
        for (c = 0; c < 4; c++)
          if (dj + TR_ATT_TD * c < qn) {
            s4[c] = fma(Qs[(dj + TR_ATT_TD * c) * sk + d], kd, s4[c]);
            p4[c] = fma(Os[(dj + TR_ATT_TD * c) * sk + d], vd, p4[c]);
          }
      }
      for (c = 0; c < 4; c++) {
        i = dj + TR_ATT_TD * c;
        if (i < qn) {
          p = j0 + kj < S ? exp(s4[c] * scale - Ls[i]) : 0.0f;
          Ps[i * sp + kj] = p;
          Ss[i * sp + kj] = p * (p4[c] - Ls[BQb + i]);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (i = 0; i < qn; i++) {
      p = Ps[i * sp + kj], ds = Ss[i * sp + kj];
      for (c = 0; c < NC; c++) {
        d = dj + TR_ATT_TD * c;
        if (d < hd) {
          dv[c] = fma(p, Os[i * sk + d], dv[c]);
          dk[c] = fma(ds, Qs[i * sk + d], dk[c]);
        }
      }
    }
  }
  if (j0 + kj < S) {
    __global float *r = dqkv + ((long)b * S + j0 + kj) * ld + (long)h * hd;
    for (c = 0; c < NC; c++) {
      d = dj + TR_ATT_TD * c;
      if (d < hd) r[D + d] = tr_round1(dk[c] * scale, fdt), r[2 * D + d] = tr_round1(dv[c], fdt);
    }
  }
}
#define TR_ATT_DKDV(NAME, NC, X16)                                                                                 \
  __kernel void NAME(__global const float *qkv, ulong qkv_off, __global const float *dO, ulong dO_off,          \
           __global const float *lse, ulong lse_off, __global const float *Dv, ulong Dv_off,          \
           __global float *dqkv, ulong dqkv_off, int S, int H, int hd, int nkb, int BQb,               \
           __local float *Ks, __local float *Vs, __local float *Qs, __local float *Os,                \
           __local float *Ls, __local float *Ps, __local float *Ss, int fdt) {                        \
    tr_att_dkdv(TR_ATT_AT(qkv, qkv_off, X16 & 1), dO + dO_off, lse + lse_off, Dv + Dv_off, dqkv + dqkv_off, S, H, hd, nkb, \
                BQb, Ks, Vs, Qs, Os, Ls, Ps, Ss, NC, fdt, X16);                                                  \
  }
TR_ATT_DKDV(tr_k_att_dkdv64, 4, 0)
TR_ATT_DKDV(tr_k_att_dkdv256, 16, 0)
TR_ATT_DKDV(tr_k_att_dkdv64_h, 4, 1)
TR_ATT_DKDV(tr_k_att_dkdv256_h, 16, 1)
/* Backward, dq: work-group (TD, BQc) owns a block of queries and loops over key blocks of BKc. */
static inline void tr_att_dq(__global const float *qkv, __global const float *dO, __global const float *lse,
           __global const float *Dv, __global float *dqkv, int S, int H, int hd, int nqb, int BKc,
           __local float *Qs, __local float *Os, __local float *Ks, __local float *Vs, __local float *Ss,
           const int NC, int fdt, const int x16) {
  const int dj = get_local_id(0), qi = get_local_id(1), BQ = get_local_size(1), NTH = TR_ATT_TD * BQ;
  const int tid = qi * TR_ATT_TD + dj, g = get_group_id(0), bh = g / nqb, q0 = (g - bh * nqb) * BQ;
  const int b = bh / H, h = bh - b * H, D = H * hd, sk = hd + 1, sp = BKc + 1;
  const long ld = 3L * D, lrow = ((long)b * H + h) * S;
  const float scale = 1.0f / sqrt((float)hd);
  const int qv = q0 + qi < S;
  const float li = qv ? lse[lrow + q0 + qi] : 0.0f, di = qv ? Dv[lrow + q0 + qi] : 0.0f;
  float dq[16], ds;
  int e, i, j, d, c, k0, kn;
  for (c = 0; c < NC; c++) dq[c] = 0.0f;
  for (e = tid; e < BQ * hd; e += NTH) {
    i = e / hd, d = e - i * hd;
    Qs[i * sk + d] = q0 + i < S ? TR_QLD(q0 + i, d) : 0.0f;
    Os[i * sk + d] = q0 + i < S ? dO[((long)b * S + q0 + i) * D + (long)h * hd + d] : 0.0f;
  }
  for (k0 = 0; k0 < S; k0 += BKc) {
    kn = min(BKc, S - k0);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (e = tid; e < kn * hd; e += NTH) {
      j = e / hd, d = e - j * hd;
      Ks[j * sk + d] = TR_QLD(k0 + j, D + d);
      Vs[j * sk + d] = TR_QLD(k0 + j, 2 * D + d);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    { /* keys dj + TD*n (n < 4: BKc <= 64); q[d], do[d] read once for the four */
      float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, p4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, qd, od, p;
      for (d = 0; d < hd; d++) {
        qd = Qs[qi * sk + d], od = Os[qi * sk + d];
        for (c = 0; c < 4; c++)
          if (dj + TR_ATT_TD * c < kn) {
            s4[c] = fma(qd, Ks[(dj + TR_ATT_TD * c) * sk + d], s4[c]);
            p4[c] = fma(od, Vs[(dj + TR_ATT_TD * c) * sk + d], p4[c]);
          }
      }
      for (c = 0; c < 4; c++) {
        j = dj + TR_ATT_TD * c;
        if (j < kn) {
          p = qv ? exp(s4[c] * scale - li) : 0.0f;
          Ss[qi * sp + j] = p * (p4[c] - di);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (j = 0; j < kn; j++) {
      ds = Ss[qi * sp + j];
      for (c = 0; c < NC; c++) {
        d = dj + TR_ATT_TD * c;
        if (d < hd) dq[c] = fma(ds, Ks[j * sk + d], dq[c]);
      }
    }
  }
  if (qv) {
    __global float *r = dqkv + ((long)b * S + q0 + qi) * ld + (long)h * hd;
    for (c = 0; c < NC; c++) {
      d = dj + TR_ATT_TD * c;
      if (d < hd) r[d] = tr_round1(dq[c] * scale, fdt);
    }
  }
}
#define TR_ATT_DQ(NAME, NC, X16)                                                                                   \
  __kernel void NAME(__global const float *qkv, ulong qkv_off, __global const float *dO, ulong dO_off,          \
           __global const float *lse, ulong lse_off, __global const float *Dv, ulong Dv_off,          \
           __global float *dqkv, ulong dqkv_off, int S, int H, int hd, int nqb, int BKc,               \
           __local float *Qs, __local float *Os, __local float *Ks, __local float *Vs,                \
           __local float *Ss, int fdt) {                                                              \
    tr_att_dq(TR_ATT_AT(qkv, qkv_off, X16 & 1), dO + dO_off, lse + lse_off, Dv + Dv_off, dqkv + dqkv_off, S, H, hd, nqb,    \
              BKc, Qs, Os, Ks, Vs, Ss, NC, fdt, X16);                                                          \
  }
TR_ATT_DQ(tr_k_att_dq64, 4, 0)
TR_ATT_DQ(tr_k_att_dq256, 16, 0)
TR_ATT_DQ(tr_k_att_dq64_h, 4, 1)
TR_ATT_DQ(tr_k_att_dq256_h, 16, 1)
#endif /* TR_MMA_ONLY */
/* Flash attention's forward on the tensor cores (TR_GEMM_MMA, gemm.cl: 1 = ldmatrix and mma.sync m16n8k16 with fp32
 accumulation; 2 = the same tiles, fragments and order of operations in plain OpenCL C, any device) for a 16-bit
 record's qkv and o (values of fdt: F16 0 bfloat16, 1 float16) and head sizes HD = 32, 64, 128. Work-group: 4 warps;
 warp w owns queries q0 + 16 w .. + 15 of one (b, h), its q fragments held in registers; blocks of 64 keys, k and v
 staged in local memory (rows padded by 16 bytes: the 8 rows one ldmatrix reads fall in distinct banks). Scores
 s = (q.k) scale and the online softmax in fp32 (p = exp(s - m); each lane sums its own p, the 4 lanes of a row added
 at the end), p rounded to fdt as the product's operand (flash attention's and cuDNN's rounding point: the one
 rounding the portable kernel does not make), o = acc / l rounded to fdt, lse = m + log(l). */
#ifdef TR_GEMM_MMA
#define TR_FA_BQ 64
#define TR_FA_BK 64
#if TR_GEMM_MMA == 1
#define TR_FA_WAIT() __asm__ volatile("cp.async.wait_all;" ::: "memory")
#define TR_FA_WAIT1() __asm__ volatile("cp.async.wait_group 1;" ::: "memory") /* all but the newest group */
#else
#define TR_FA_WAIT()
#define TR_FA_WAIT1()
#endif
/* k and v tiles in flight at once in the forward: two (the next block's copies overlap this block's products) where
 both pairs fit in 48 KiB of local memory, HD <= 64 */
#define TR_FA_NS(HD) ((HD) <= 64 ? 2 : 1)
/* v of lane (lane ^ m) of this warp (m < 4: the lanes of one row of a fragment); X: 128 floats of exchange (2) */
static inline float tr_fa_xor(float v, int m, __local float *X) {
#if TR_GEMM_MMA == 1
  uint r;
  (void)X;
  __asm__ volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(as_uint(v)), "r"(m));
  return as_float(r);
#else
  const int t = get_local_id(0);
  float r;
  X[t] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  r = X[t ^ m];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
#endif
}
/* rows r0 .. r0 + rows - 1 of an HD-wide slice of qkv (rows ld values apart) into T, zeros past row S */
static inline void tr_fa_stage(__local uint *T, __global const ushort *P, long ld, int r0, int rows, int S, const int HD) {
  const int CH = HD / 8, SW = (HD + 8) / 2;
  int e;
  for (e = get_local_id(0); e < rows * CH; e += 128) {
    const int r = e / CH, c = e - r * CH, in = r0 + r < S;
    TR_HCP(T + r * SW + 4 * c, P + (long)(in ? r0 + r : 0) * ld + 8 * c, in ? 16 : 0);
  }
}
#if TR_GEMM_MMA != 1
/* the value at row r, column d of a staged tile */
static inline float tr_fa_at(__local const uint *T, int r, int d, const int HD, int fdt) {
  return tr_unhalf1((ushort)(T[r * ((HD + 8) / 2) + (d >> 1)] >> (16 * (d & 1))), fdt);
}
#endif
static inline void tr_fa_fwd(__global const ushort *qkv, __global ushort *o, __global float *lse, int S, int H, int nqb,
                             __local uint *L, __local float *X, const int HD, const int F16) {
  const int fdt = F16 ? 2 : 1, SW = (HD + 8) / 2, NK = HD / 16, ND = HD / 8, NJ = TR_FA_BK / 8;
  const int tid = get_local_id(0), w = tid >> 5, g = (tid & 31) >> 2, q = tid & 3;
  const int gi = get_group_id(0), bh = gi / nqb, q0 = (gi - bh * nqb) * TR_FA_BQ, b = bh / H, h = bh - b * H, D = H * HD;
  const long ld = 3L * D;
  __global const ushort *base = qkv + (long)b * S * ld + (long)h * HD;
  const int NS = TR_FA_NS(HD);
  __local uint *Ks = L, *Vs = L + TR_FA_BK * SW;
  const float scale = 1.0f / sqrt((float)HD);
  float acc[16][4], s[TR_FA_BK / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, mx[2], al[2];
  int i, j, r, kk, k0, t;
#if TR_GEMM_MMA == 1
  const int lr = tid & 7, lm = (tid >> 3) & 3; /* ldmatrix: the row and the matrix whose address this lane gives */
  uint qa[8][4];
  tr_fa_stage(Ks, base, ld, q0, TR_FA_BQ, S, HD); /* this group's queries, through the k tile's room, into registers */
  TR_HCOMMIT();
  TR_FA_WAIT();
  barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
  for (kk = 0; kk < NK; kk++) TR_LDM4(qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], Ks + (16 * w + (lm & 1) * 8 + lr) * SW + (2 * kk + (lm >> 1)) * 4);
#else
  __local float *Pw = X + 128 + w * 16 * TR_FA_BK; /* this warp's rounded p, 16 x 64 */
#endif
#pragma unroll
  for (i = 0; i < ND; i++)
#pragma unroll
    for (r = 0; r < 4; r++) acc[i][r] = 0.0f;
  if (NS == 2) {
    barrier(CLK_LOCAL_MEM_FENCE); /* (the q fragments are out of stage 0) */
    tr_fa_stage(Ks, base + D, ld, 0, TR_FA_BK, S, HD);
    tr_fa_stage(Vs, base + 2 * D, ld, 0, TR_FA_BK, S, HD);
    TR_HCOMMIT();
  }
  for (k0 = 0, t = 0; k0 < S; k0 += TR_FA_BK, t++) {
    Ks = L + (t % NS) * 2 * TR_FA_BK * SW, Vs = Ks + TR_FA_BK * SW;
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the last tiles (the other stage's, with two) */
    if (NS == 2) { /* the next block's copies into the other stage, in flight while this one's are used */
      __local uint *Kn = L + ((t + 1) % 2) * 2 * TR_FA_BK * SW;
      if (k0 + TR_FA_BK < S) {
        tr_fa_stage(Kn, base + D, ld, k0 + TR_FA_BK, TR_FA_BK, S, HD);
        tr_fa_stage(Kn + TR_FA_BK * SW, base + 2 * D, ld, k0 + TR_FA_BK, TR_FA_BK, S, HD);
      }
      TR_HCOMMIT(); /* (an empty group at the end keeps the count) */
      TR_FA_WAIT1();
    } else {
      tr_fa_stage(Ks, base + D, ld, k0, TR_FA_BK, S, HD);
      tr_fa_stage(Vs, base + 2 * D, ld, k0, TR_FA_BK, S, HD);
      TR_HCOMMIT();
      TR_FA_WAIT();
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (j = 0; j < NJ; j++)
#pragma unroll
      for (r = 0; r < 4; r++) s[j][r] = 0.0f;
#pragma unroll
    for (kk = 0; kk < NK; kk++) {
#if TR_GEMM_MMA == 1
#pragma unroll
      for (j = 0; j < NJ; j += 2) {
        uint b0[2], b1[2];
        TR_LDM4(b0[0], b0[1], b1[0], b1[1], Ks + ((j + (lm >> 1)) * 8 + lr) * SW + (2 * kk + (lm & 1)) * 4);
        if (F16) {
          __asm__ volatile(TR_MMA_F16 TR_MMA_OPS TR_MMA_ARGS(s[j], qa[kk], b0));
          __asm__ volatile(TR_MMA_F16 TR_MMA_OPS TR_MMA_ARGS(s[j + 1], qa[kk], b1));
        } else {
          __asm__ volatile(TR_MMA_BF16 TR_MMA_OPS TR_MMA_ARGS(s[j], qa[kk], b0));
          __asm__ volatile(TR_MMA_BF16 TR_MMA_OPS TR_MMA_ARGS(s[j + 1], qa[kk], b1));
        }
      }
#else /* the fragment's outputs: rows g (r < 2) or g + 8, keys 8 j + 2 q + (r & 1) */
      for (j = 0; j < NJ; j++)
        for (r = 0; r < 4; r++) {
          const int qr = q0 + 16 * w + g + 8 * (r >> 1), kr = 8 * j + 2 * q + (r & 1);
          int d;
          for (d = 16 * kk; d < 16 * kk + 16; d++)
            s[j][r] = fma(qr < S ? tr_unhalf1(base[(long)qr * ld + d], fdt) : 0.0f, tr_fa_at(Ks, kr, d, HD, fdt), s[j][r]);
        }
#endif
    }
    /* the online softmax: the rows' maxima over the 4 lanes that hold them, p, this lane's sums */
    mx[0] = m[0], mx[1] = m[1];
#pragma unroll
    for (j = 0; j < NJ; j++)
#pragma unroll
      for (r = 0; r < 4; r++) {
        s[j][r] = k0 + 8 * j + 2 * q + (r & 1) < S ? s[j][r] * scale : -INFINITY;
        mx[r >> 1] = fmax(mx[r >> 1], s[j][r]);
      }
#pragma unroll
    for (i = 0; i < 2; i++) {
      mx[i] = fmax(mx[i], tr_fa_xor(mx[i], 1, X));
      mx[i] = fmax(mx[i], tr_fa_xor(mx[i], 2, X));
      al[i] = exp(m[i] - mx[i]);
      m[i] = mx[i];
      l[i] *= al[i];
    }
#pragma unroll
    for (i = 0; i < ND; i++)
#pragma unroll
      for (r = 0; r < 4; r++) acc[i][r] *= al[r >> 1];
#pragma unroll
    for (j = 0; j < NJ; j++)
#pragma unroll
      for (r = 0; r < 4; r++) {
        s[j][r] = exp(s[j][r] - m[r >> 1]);
        l[r >> 1] += s[j][r];
      }
    /* acc += p v: p's fragments are the scores' (keys 16 kk .. + 15: columns j = 2 kk, 2 kk + 1) */
#if TR_GEMM_MMA == 1
#pragma unroll
    for (kk = 0; kk < TR_FA_BK / 16; kk++) {
      uint pa[4];
      pa[0] = tr_mma_pack(s[2 * kk][0], s[2 * kk][1], F16), pa[1] = tr_mma_pack(s[2 * kk][2], s[2 * kk][3], F16);
      pa[2] = tr_mma_pack(s[2 * kk + 1][0], s[2 * kk + 1][1], F16), pa[3] = tr_mma_pack(s[2 * kk + 1][2], s[2 * kk + 1][3], F16);
#pragma unroll
      for (i = 0; i < ND; i += 2) {
        uint b0[2], b1[2];
        TR_LDM4T(b0[0], b0[1], b1[0], b1[1], Vs + (16 * kk + (lm & 1) * 8 + lr) * SW + (i + (lm >> 1)) * 4);
        if (F16) {
          __asm__ volatile(TR_MMA_F16 TR_MMA_OPS TR_MMA_ARGS(acc[i], pa, b0));
          __asm__ volatile(TR_MMA_F16 TR_MMA_OPS TR_MMA_ARGS(acc[i + 1], pa, b1));
        } else {
          __asm__ volatile(TR_MMA_BF16 TR_MMA_OPS TR_MMA_ARGS(acc[i], pa, b0));
          __asm__ volatile(TR_MMA_BF16 TR_MMA_OPS TR_MMA_ARGS(acc[i + 1], pa, b1));
        }
      }
    }
#else
    for (j = 0; j < NJ; j++)
      for (r = 0; r < 4; r++) Pw[(g + 8 * (r >> 1)) * TR_FA_BK + 8 * j + 2 * q + (r & 1)] = tr_round1(s[j][r], fdt);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (kk = 0; kk < TR_FA_BK / 16; kk++)
      for (i = 0; i < ND; i++)
        for (r = 0; r < 4; r++) {
          const int pr = g + 8 * (r >> 1), d = 8 * i + 2 * q + (r & 1);
          int kr;
          for (kr = 16 * kk; kr < 16 * kk + 16; kr++) acc[i][r] = fma(Pw[pr * TR_FA_BK + kr], tr_fa_at(Vs, kr, d, HD, fdt), acc[i][r]);
        }
#endif
  }
#pragma unroll
  for (i = 0; i < 2; i++) { /* the row's sum: (lanes 0 + 1) + (lanes 2 + 3) on each of its 4 lanes */
    const int row = q0 + 16 * w + g + 8 * i;
    l[i] += tr_fa_xor(l[i], 1, X);
    l[i] += tr_fa_xor(l[i], 2, X);
    if (row < S) {
      __global ushort *orow = o + ((long)b * S + row) * D + (long)h * HD + 2 * q;
#pragma unroll
      for (j = 0; j < ND; j++) *(__global ushort2 *)(orow + 8 * j) = (ushort2)(tr_half1(acc[j][2 * i] / l[i], fdt), tr_half1(acc[j][2 * i + 1] / l[i], fdt));
      if (q == 0) lse[((long)b * H + h) * S + row] = m[i] + log(l[i]);
    }
  }
}
/* tr_k_hmma_att_fwd<HD>_<bf16|f16>: qkv and o of 16-bit values (offsets in floats, as the _h kernels'), lse fp32; a
 work-group of 128 for each 64 queries of each (b, h), nqb blocks a head. L: 2 x 64 staged rows of HD + 8 values
 (16-byte aligned, as cp.async and ldmatrix need: a kernel's own array, not an argument's); X: the emulation's exchange
 and p (128 + 4 x 16 x 64 floats) */
#if TR_GEMM_MMA == 1
#define TR_FA_XN 1
#else
#define TR_FA_XN (128 + 4 * 16 * TR_FA_BK)
#endif
#define TR_FA_FWD_K(NAME, HD, F16)                                                                                     \
  __kernel __attribute__((reqd_work_group_size(128, 1, 1))) void NAME(__global const float *qkv, ulong qkv_off,      \
           __global float *o, ulong o_off, __global float *lse, ulong lse_off, int S, int H, int nqb) {               \
    __local uint4 L[TR_FA_NS(HD) * 2 * TR_FA_BK * ((HD) + 8) / 8];                                                     \
    __local float X[TR_FA_XN];                                                                                         \
    tr_fa_fwd((__global const ushort *)qkv + 2 * qkv_off, (__global ushort *)o + 2 * o_off, lse + lse_off, S, H, nqb, \
              (__local uint *)L, X, HD, F16);                                                                          \
  }
TR_FA_FWD_K(tr_k_hmma_att_fwd32_bf16, 32, 0)
TR_FA_FWD_K(tr_k_hmma_att_fwd64_bf16, 64, 0)
TR_FA_FWD_K(tr_k_hmma_att_fwd128_bf16, 128, 0)
TR_FA_FWD_K(tr_k_hmma_att_fwd32_f16, 32, 1)
TR_FA_FWD_K(tr_k_hmma_att_fwd64_f16, 64, 1)
TR_FA_FWD_K(tr_k_hmma_att_fwd128_f16, 128, 1)
/* Flash attention's backward on the tensor cores, FlashAttention-2's two passes (no atomics; each output written once):
 tr_k_hmma_att_dkdv* (4 warps own 64 keys of one (b, h), warp w keys 16 w .. + 15, and loop over blocks of NB queries)
 and tr_k_hmma_att_dq* (4 warps own 64 queries, loop over blocks of NB keys). Each recomputes s = q.k scale,
 p = exp(s - lse) and ds = p (do.v - Dv) (Dv = do.o: tr_k_att_dot8_h) from fp32 sums, and multiplies on m16n8k16 with
 fp32 sums. The operands are values of fdt: qkv as stored; do (fp32 on the tape) rounded once to fdt (do16, written by
 tr_k_att_dot8_h beside Dv); p and ds rounded to fdt as the products' operands (flash attention's rounding points; the
 portable kernels make none of the three). dq = R(scale sum ds k), dk = R(scale sum ds q), dv = R(sum p do), fp32 values of fdt in dqkv. With
 TR_GEMM_MMA == 2, ldmatrix and mma.sync themselves are emulated a warp at a time through local memory (X: 6 words a
 work-item), so the emulation runs these very fragments, indices and addresses, on any device. */
#if TR_GEMM_MMA == 1
#define TR_FB_XN 1
#define TR_FB_LDM(r, T, off) TR_LDM4(r[0], r[1], r[2], r[3], (T) + (off))
#define TR_FB_LDMT(r, T, off) TR_LDM4T(r[0], r[1], r[2], r[3], (T) + (off))
#define TR_FB_MMA(c, a, b, F16)                                           \
  do {                                                                    \
    if (F16) __asm__ volatile(TR_MMA_F16 TR_MMA_OPS TR_MMA_ARGS((c), (a), (b)));  \
    else __asm__ volatile(TR_MMA_BF16 TR_MMA_OPS TR_MMA_ARGS((c), (a), (b)));     \
  } while (0)
#else
#define TR_FB_XN (6 * 128)
#define TR_FB_LDM(r, T, off) tr_em_ldm(r, T, off, 0, X)
#define TR_FB_LDMT(r, T, off) tr_em_ldm(r, T, off, 1, X)
#define TR_FB_MMA(c, a, b, F16) tr_em_mma(c, a, b, F16, X)
/* ldmatrix.x4 (tr: .trans) of one warp: lane l gives the word offset in T of row l & 7 of matrix l >> 3; lane t gets, of
 each matrix i, the two values at row t >> 2, columns 2 (t & 3) and + 1 (of the transpose with tr), low one first */
static inline void tr_em_ldm(uint r[4], __local const uint *T, int off, int tr, __local uint *X) {
  const int t = get_local_id(0), wb = t & ~31, l = t & 31, c = l >> 2;
  int i;
  X[t] = (uint)off;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (i = 0; i < 4; i++)
    if (!tr) r[i] = T[X[wb + 8 * i + c] + (l & 3)];
    else {
      const uint lo = T[X[wb + 8 * i + 2 * (l & 3)] + (c >> 1)] >> (16 * (c & 1)) & 0xffffu;
      const uint hi = T[X[wb + 8 * i + 2 * (l & 3) + 1] + (c >> 1)] >> (16 * (c & 1)) & 0xffffu;
      r[i] = lo | hi << 16;
    }
  barrier(CLK_LOCAL_MEM_FENCE);
}
/* mma.sync m16n8k16 of one warp, c += a b: a's word i holds rows g + 8 (i & 1), depths 2 q + 8 (i >> 1) and + 1; b's
 word i column g, depths 2 q + 8 i and + 1; c's value r row g + 8 (r >> 1), column 2 q + (r & 1) (lane = 4 g + q) */
static inline void tr_em_mma(float c[4], const uint a[4], const uint b[2], const int F16, __local uint *X) {
  const int t = get_local_id(0), wb = t & ~31, l = t & 31, g = l >> 2, q = l & 3, fdt = F16 ? 2 : 1;
  int i, r, k;
  for (i = 0; i < 4; i++) X[6 * t + i] = a[i];
  X[6 * t + 4] = b[0], X[6 * t + 5] = b[1];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (r = 0; r < 4; r++) {
    const int row = g + 8 * (r >> 1), col = 2 * q + (r & 1);
    for (k = 0; k < 16; k++) {
      const uint aw = X[6 * (wb + 4 * (row & 7) + ((k & 7) >> 1)) + (row >> 3) + 2 * (k >> 3)];
      const uint bw = X[6 * (wb + 4 * col + ((k & 7) >> 1)) + 4 + (k >> 3)];
      c[r] = fma(tr_unhalf1((ushort)(aw >> (16 * (k & 1))), fdt), tr_unhalf1((ushort)(bw >> (16 * (k & 1))), fdt), c[r]);
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}
#endif
/* s[j] (+)= a b over the head dimension: a a warp's 16 rows of tile A (its fragments loaded here), b rows 8 j .. + 7 of
 tile B (the product's columns), j < NJ; c[j] the same from tiles A2, B2 (a backward pass's two products) */
static inline void tr_fb_scores(float s[8][4], float c[8][4], __local const uint *A, __local const uint *B, __local const uint *A2,
                                __local const uint *B2, const int HD, const int NJ, const int F16, __local uint *X) {
  const int SW = (HD + 8) / 2, tid = get_local_id(0), w = tid >> 5, lr = tid & 7, lm = (tid >> 3) & 3;
  int kk, j;
  (void)X;
#pragma unroll
  for (kk = 0; kk < HD / 16; kk++) {
    uint fa[4], fa2[4];
    const int oa = (16 * w + (lm & 1) * 8 + lr) * SW + (2 * kk + (lm >> 1)) * 4;
    TR_FB_LDM(fa, A, oa);
    TR_FB_LDM(fa2, A2, oa);
#pragma unroll
    for (j = 0; j < NJ; j += 2) {
      uint fb[4], fb2[4];
      const int ob = ((j + (lm >> 1)) * 8 + lr) * SW + (2 * kk + (lm & 1)) * 4;
      TR_FB_LDM(fb, B, ob);
      TR_FB_LDM(fb2, B2, ob);
      TR_FB_MMA(s[j], fa, fb, F16);
      TR_FB_MMA(s[j + 1], fa, fb + 2, F16);
      TR_FB_MMA(c[j], fa2, fb2, F16);
      TR_FB_MMA(c[j + 1], fa2, fb2 + 2, F16);
    }
  }
}
/* the fragments (as a product's a) of 16 columns kk of a warp's 16-row accumulator s, rounded to fdt */
#define TR_FB_AFRAG(a, s, kk)                                                                                 \
  a[0] = tr_mma_pack(s[2 * (kk)][0], s[2 * (kk)][1], F16), a[1] = tr_mma_pack(s[2 * (kk)][2], s[2 * (kk)][3], F16), \
  a[2] = tr_mma_pack(s[2 * (kk) + 1][0], s[2 * (kk) + 1][1], F16), a[3] = tr_mma_pack(s[2 * (kk) + 1][2], s[2 * (kk) + 1][3], F16)
/* acc[i] (+)= a (16 columns of a warp's accumulator as a product's a fragment, TR_FB_AFRAG) times rows 16 kk .. + 15
 of tile T, whose columns are the head dimension, i < HD / 8 */
static inline void tr_fb_acc(float acc[16][4], const uint a[4], __local const uint *T, int kk, const int HD, const int F16, __local uint *X) {
  const int SW = (HD + 8) / 2, tid = get_local_id(0), lr = tid & 7, lm = (tid >> 3) & 3;
  int i;
  (void)X;
#pragma unroll
  for (i = 0; i < HD / 8; i += 2) {
    uint fb[4];
    TR_FB_LDMT(fb, T, (16 * kk + (lm & 1) * 8 + lr) * SW + (i + (lm >> 1)) * 4);
    TR_FB_MMA(acc[i], a, fb, F16);
    TR_FB_MMA(acc[i + 1], a, fb + 2, F16);
  }
}
/* this lane's values of row g + 8 r8 of a warp's accumulator, times mul and rounded to fdt, from dst (its column 2 q) */
static inline void tr_fb_put(__global float *dst, float acc[16][4], int r8, float mul, const int HD, int fdt) {
  int j;
#pragma unroll
  for (j = 0; j < HD / 8; j++) dst[8 * j] = tr_round1(acc[j][2 * r8] * mul, fdt), dst[8 * j + 1] = tr_round1(acc[j][2 * r8 + 1] * mul, fdt);
}
static inline void tr_fb_dq(__global const ushort *qkv, __global const ushort *dO, __global const float *lse, __global const float *Dv,
                            __global float *dqkv, int S, int H, int nqb, __local uint *L, __local uint *X, const int HD, const int BK,
                            const int F16) {
  const int fdt = F16 ? 2 : 1, SW = (HD + 8) / 2, ND = HD / 8, NJ = BK / 8;
  const int tid = get_local_id(0), w = tid >> 5, g = (tid & 31) >> 2, q = tid & 3;
  const int gi = get_group_id(0), bh = gi / nqb, q0 = (gi - bh * nqb) * TR_FA_BQ, b = bh / H, h = bh - b * H, D = H * HD;
  const long ld = 3L * D;
  __global const ushort *base = qkv + (long)b * S * ld + (long)h * HD;
  __local uint *Qs = L, *Os = L + TR_FA_BQ * SW, *Ks = L + 2 * TR_FA_BQ * SW, *Vs = Ks + BK * SW;
  const float scale = 1.0f / sqrt((float)HD);
  float acc[16][4], s[8][4], dp[8][4], li[2], di[2];
  int i, j, r, kk, k0;
  (void)X;
  tr_fa_stage(Qs, base, ld, q0, TR_FA_BQ, S, HD);
  tr_fa_stage(Os, dO + (long)b * S * D + (long)h * HD, D, q0, TR_FA_BQ, S, HD);
  TR_HCOMMIT();
  for (i = 0; i < 2; i++) { /* (a row past S: p = 0) */
    const int row = q0 + 16 * w + g + 8 * i;
    li[i] = row < S ? lse[(long)bh * S + row] : INFINITY;
    di[i] = row < S ? Dv[(long)bh * S + row] : 0.0f;
  }
#pragma unroll
  for (i = 0; i < ND; i++)
#pragma unroll
    for (r = 0; r < 4; r++) acc[i][r] = 0.0f;
  for (k0 = 0; k0 < S; k0 += BK) {
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the last tiles */
    tr_fa_stage(Ks, base + D, ld, k0, BK, S, HD);
    tr_fa_stage(Vs, base + 2 * D, ld, k0, BK, S, HD);
    TR_HCOMMIT();
    TR_FA_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (j = 0; j < NJ; j++)
#pragma unroll
      for (r = 0; r < 4; r++) s[j][r] = dp[j][r] = 0.0f;
    tr_fb_scores(s, dp, Qs, Ks, Os, Vs, HD, NJ, F16, X); /* s = q k^T, dp = do v^T */
#pragma unroll
    for (j = 0; j < NJ; j++)
#pragma unroll
      for (r = 0; r < 4; r++) {
        const float p = k0 + 8 * j + 2 * q + (r & 1) < S ? exp(s[j][r] * scale - li[r >> 1]) : 0.0f;
        s[j][r] = p * (dp[j][r] - di[r >> 1]); /* ds */
      }
#pragma unroll
    for (kk = 0; kk < BK / 16; kk++) { /* acc += ds k */
      uint da[4];
      TR_FB_AFRAG(da, s, kk);
      tr_fb_acc(acc, da, Ks, kk, HD, F16, X);
    }
  }
  for (i = 0; i < 2; i++) {
    const int row = q0 + 16 * w + g + 8 * i;
    if (row < S) tr_fb_put(dqkv + ((long)b * S + row) * ld + (long)h * HD + 2 * q, acc, i, scale, HD, fdt);
  }
}
static inline void tr_fb_dkdv(__global const ushort *qkv, __global const ushort *dO, __global const float *lse, __global const float *Dv,
                              __global float *dqkv, int S, int H, int nkb, __local uint *L, __local float *Lf, __local uint *X,
                              const int HD, const int BQ, const int F16) {
  const int fdt = F16 ? 2 : 1, SW = (HD + 8) / 2, ND = HD / 8, NJ = BQ / 8;
  const int tid = get_local_id(0), w = tid >> 5, g = (tid & 31) >> 2, q = tid & 3;
  const int gi = get_group_id(0), bh = gi / nkb, j0 = (gi - bh * nkb) * TR_FA_BK, b = bh / H, h = bh - b * H, D = H * HD;
  const long ld = 3L * D;
  __global const ushort *base = qkv + (long)b * S * ld + (long)h * HD;
  __global const ushort *obase = dO + (long)b * S * D + (long)h * HD;
  __local uint *Ks = L, *Vs = L + TR_FA_BK * SW, *Qs = L + 2 * TR_FA_BK * SW, *Os = Qs + BQ * SW;
  __local float *Ls = Lf, *Ds = Lf + BQ;
  const float scale = 1.0f / sqrt((float)HD);
  float dk[16][4], dv[16][4], s[8][4], dp[8][4];
  int i, j, r, kk, i0, e;
  (void)X;
  tr_fa_stage(Ks, base + D, ld, j0, TR_FA_BK, S, HD);
  tr_fa_stage(Vs, base + 2 * D, ld, j0, TR_FA_BK, S, HD);
  TR_HCOMMIT();
#pragma unroll
  for (i = 0; i < ND; i++)
#pragma unroll
    for (r = 0; r < 4; r++) dk[i][r] = dv[i][r] = 0.0f;
  for (i0 = 0; i0 < S; i0 += BQ) {
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the last tiles */
    tr_fa_stage(Qs, base, ld, i0, BQ, S, HD);
    tr_fa_stage(Os, obase, D, i0, BQ, S, HD);
    TR_HCOMMIT();
    for (e = tid; e < BQ; e += 128) { /* (a query past S: p = 0) */
      Ls[e] = i0 + e < S ? lse[(long)bh * S + i0 + e] : INFINITY;
      Ds[e] = i0 + e < S ? Dv[(long)bh * S + i0 + e] : 0.0f;
    }
    TR_FA_WAIT();
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (j = 0; j < NJ; j++)
#pragma unroll
      for (r = 0; r < 4; r++) s[j][r] = dp[j][r] = 0.0f;
    tr_fb_scores(s, dp, Ks, Qs, Vs, Os, HD, NJ, F16, X); /* s^T = k q^T, dp^T = v do^T: rows keys, columns queries */
#pragma unroll
    for (j = 0; j < NJ; j++)
#pragma unroll
      for (r = 0; r < 4; r++) {
        const int c = 8 * j + 2 * q + (r & 1);
        s[j][r] = exp(s[j][r] * scale - Ls[c]);   /* p^T */
        dp[j][r] = s[j][r] * (dp[j][r] - Ds[c]); /* ds^T */
      }
#pragma unroll
    for (kk = 0; kk < BQ / 16; kk++) { /* dv += p^T do, dk += ds^T q */
      uint pa[4], da[4];
      TR_FB_AFRAG(pa, s, kk);
      TR_FB_AFRAG(da, dp, kk);
      tr_fb_acc(dv, pa, Os, kk, HD, F16, X);
      tr_fb_acc(dk, da, Qs, kk, HD, F16, X);
    }
  }
  for (i = 0; i < 2; i++) {
    const int row = j0 + 16 * w + g + 8 * i;
    if (row < S) {
      __global float *dst = dqkv + ((long)b * S + row) * ld + (long)h * HD + 2 * q;
      tr_fb_put(dst + D, dk, i, scale, HD, fdt);
      tr_fb_put(dst + 2 * D, dv, i, 1.0f, HD, fdt); /* (x 1: exact) */
    }
  }
}
/* tr_k_hmma_att_dq<HD>_<bf16|f16> and _dkdv: qkv and do16 16-bit (offsets in floats, as the forward's), lse, Dv and dqkv fp32;
 a work-group of 128 for each 64 queries (dq) or keys (dkdv) of each (b, h), nb blocks a head. The blocks they loop over
 (dq's keys, dkdv's queries): NB = 64 rows, 16 at HD = 128 (the four tiles within 48 KiB of local memory). */
#define TR_FB_ARGS                                                                                                     \
  __global const float *qkv, ulong qkv_off, __global const float *dO, ulong dO_off, __global const float *lse,        \
      ulong lse_off, __global const float *Dv, ulong Dv_off, __global float *dqkv, ulong dqkv_off, int S, int H, int nb
#define TR_FB_K(HD, T, F16, NB)                                                                                        \
  __kernel __attribute__((reqd_work_group_size(128, 1, 1))) void tr_k_hmma_att_dq##HD##_##T(TR_FB_ARGS) {             \
    __local uint4 L[(2 * TR_FA_BQ + 2 * (NB)) * ((HD) + 8) / 8];                                                      \
    __local uint X[TR_FB_XN];                                                                                          \
    tr_fb_dq((__global const ushort *)qkv + 2 * qkv_off, (__global const ushort *)dO + 2 * dO_off, lse + lse_off, Dv + Dv_off, dqkv + dqkv_off, S, H, \
             nb, (__local uint *)L, X, HD, NB, F16);                                                                   \
  }                                                                                                                    \
  __kernel __attribute__((reqd_work_group_size(128, 1, 1))) void tr_k_hmma_att_dkdv##HD##_##T(TR_FB_ARGS) {           \
    __local uint4 L[(2 * TR_FA_BK + 2 * (NB)) * ((HD) + 8) / 8];                                                       \
    __local float Lf[2 * (NB)];                                                                                        \
    __local uint X[TR_FB_XN];                                                                                          \
    tr_fb_dkdv((__global const ushort *)qkv + 2 * qkv_off, (__global const ushort *)dO + 2 * dO_off, lse + lse_off, Dv + Dv_off, dqkv + dqkv_off, S, \
               H, nb, (__local uint *)L, Lf, X, HD, NB, F16);                                                          \
  }
TR_FB_K(32, bf16, 0, 64)
TR_FB_K(64, bf16, 0, 64)
TR_FB_K(128, bf16, 0, 16)
TR_FB_K(32, f16, 1, 64)
TR_FB_K(64, f16, 1, 64)
TR_FB_K(128, f16, 1, 16)
#endif /* TR_GEMM_MMA */
