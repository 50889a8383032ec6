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
