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
#else
#define TR_FA_WAIT()
#endif
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
/* rows r0 .. r0 + 63 of an HD-wide slice of qkv (rows ld values apart) into T, zeros past row S */
static inline void tr_fa_stage(__local uint *T, __global const ushort *P, long ld, int r0, int S, const int HD) {
  const int CH = HD / 8, SW = (HD + 8) / 2;
  int e;
  for (e = get_local_id(0); e < TR_FA_BK * CH; e += 128) {
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
  __local uint *Ks = L, *Vs = L + TR_FA_BK * SW;
  const float scale = 1.0f / sqrt((float)HD);
  float acc[16][4], s[TR_FA_BK / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, mx[2], al[2];
  int i, j, r, kk, k0;
#if TR_GEMM_MMA == 1
  const int lr = tid & 7, lm = (tid >> 3) & 3; /* ldmatrix: the row and the matrix whose address this lane gives */
  uint qa[8][4];
  tr_fa_stage(Ks, base, ld, q0, S, HD); /* this group's queries, through the k tile's room, into registers */
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
  for (k0 = 0; k0 < S; k0 += TR_FA_BK) {
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the last tiles */
    tr_fa_stage(Ks, base + D, ld, k0, S, HD);
    tr_fa_stage(Vs, base + 2 * D, ld, k0, S, HD);
    TR_HCOMMIT();
    TR_FA_WAIT();
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
    __local uint4 L[2 * TR_FA_BK * ((HD) + 8) / 8];                                                                    \
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
#endif /* TR_GEMM_MMA */
