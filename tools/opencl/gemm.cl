/* tinyrec OpenCL SGEMM. Tile: TM x TN of C per work-group, TK deep; each work-item owns WM x WN
 outputs (strided by the thread grid, or in runs of VW=4 for float4 local reads). */
#ifndef TR_GEMM_TM
#define TR_GEMM_TM 32
#endif
#ifndef TR_GEMM_TN
#define TR_GEMM_TN 32
#endif
#ifndef TR_GEMM_TK
#define TR_GEMM_TK 8
#endif
#ifndef TR_GEMM_WM
#define TR_GEMM_WM 4
#endif
#ifndef TR_GEMM_WN
#define TR_GEMM_WN 4
#endif
#ifndef TR_GEMM_VW
#define TR_GEMM_VW 1
#endif
#define TR_RM (TR_GEMM_TM / TR_GEMM_WM)
#define TR_RN (TR_GEMM_TN / TR_GEMM_WN)
#define TR_NT (TR_RM * TR_RN)
#define TR_LA (TR_GEMM_TM * TR_GEMM_TK / TR_NT)
#define TR_LB (TR_GEMM_TN * TR_GEMM_TK / TR_NT)
/* WL: work-items of a 32-wide warp as 4 x 8 (rows x columns) of the thread grid (fewer distinct local reads);
 DB: two local buffers (one barrier per tile instead of two). Per transpose case (measured on an H200), or
 -DTR_GEMM_WL / -DTR_GEMM_DB for all. */
#define TR_WL_OK (TR_RN % 8 == 0 && TR_RM % 4 == 0 && TR_NT % 32 == 0)
#ifdef TR_GEMM_WL
#define TR_WL(d) (TR_GEMM_WL && TR_WL_OK)
#else
#define TR_WL(d) ((d) && TR_WL_OK)
#endif
#ifdef TR_GEMM_DB
#define TR_DB(d) TR_GEMM_DB
#else
#define TR_DB(d) (d)
#endif
#if TR_GEMM_VW == 4
#define TR_GPAD 4
#define TR_ROWA(i) (((i) >> 2) * (TR_RM * 4) + ty * 4 + ((i) & 3))
#define TR_COLB(j) (((j) >> 2) * (TR_RN * 4) + tx * 4 + ((j) & 3))
#else
#define TR_GPAD 1
#define TR_ROWA(i) ((i) * TR_RM + ty)
#define TR_COLB(j) ((j) * TR_RN + tx)
#endif
#define TR_SA (TR_GEMM_TM + TR_GPAD)
#define TR_SB (TR_GEMM_TN + TR_GPAD)
#define TR_ASZ (TR_GEMM_TK * TR_SA)
#define TR_BSZ (TR_GEMM_TK * TR_SB)
/* float4 global loads of a tile (interior, 16-byte aligned rows): count per work-item, 0 = not possible */
#if TR_GEMM_TK % 4 == 0 && TR_GEMM_TM % 4 == 0 && (TR_GEMM_TM * TR_GEMM_TK / 4) % TR_NT == 0
#define TR_VLA (TR_LA / 4)
#else
#define TR_VLA 0
#endif
#if TR_GEMM_TK % 4 == 0 && TR_GEMM_TN % 4 == 0 && (TR_GEMM_TN * TR_GEMM_TK / 4) % TR_NT == 0
#define TR_VLB (TR_LB / 4)
#else
#define TR_VLB 0
#endif
/* The kernel's name carries its tile configuration, so that a host that computed another one fails to find it. */
#define TR_GNAME2(t, a, b, c, d, e, f) tr_k_sgemm_##t##_##a##_##b##_##c##_##d##_##e##_##f
#define TR_GNAME(t, a, b, c, d, e, f) TR_GNAME2(t, a, b, c, d, e, f)
/* Element l of the tile (k depth, x) a work-item fetches: CK (P stored x-major, k contiguous) or k-major; V: float4
 along the contiguous dimension (a run of 4). Consecutive work-items read consecutive addresses either way. */
#define TR_EIDX(XT, CK, V)                                                                                     \
  e = tid + l * TR_NT;                                                                                       \
  if (CK) q = e % (TR_GEMM_TK / (V)), x = e / (TR_GEMM_TK / (V));                                            \
  else x = e % ((XT) / (V)), q = e / ((XT) / (V));
/* vec fetch (interior tile, 16-byte aligned rows): r[4l..4l+3] = a float4 at depth k0 + 4q (CK) or x0 + 4x */
/* SWF: the operand is a gate_up tensor read as silu(gate) * up, the up at +so (SwiGLU fused into the fetch; the
 formula of tr_k_swiglu_fwd, so the products equal those of the activation it would have written) */
/* GF: a gate_up product (GU): tile rows x < XT/2 are gate rows x0 + x, the others their ups x0 + x - XT/2 + gh */
#define TR_XR(x0, x, XT, GF) ((GF) ? ((x) < (XT) / 2 ? (x0) + (x) : (x0) + (x) - (XT) / 2 + gh) : (x0) + (x))
#define TR_XB(x0, x, XT, GF) ((GF) ? (x0) + (x) % ((XT) / 2) : (x0) + (x))
#define TR_VFETCH(P, ld, r, x0, XT, CK, LD, SWF, GF)                                                           \
  TR_EIDX(XT, CK, 4)                                                                                         \
  pp = CK ? P + (long)TR_XR(x0, x, XT, GF) * ld + (k0 + 4 * q) : P + (long)(k0 + q) * ld + (x0 + 4 * x);    \
  v = LD(pp);                                                                                                \
  if (SWF) v = v / (1.0f + exp(-v)) * LD(pp + so);                                                          \
  r[4 * l] = v.s0, r[4 * l + 1] = v.s1, r[4 * l + 2] = v.s2, r[4 * l + 3] = v.s3;
#define TR_SFETCH(P, ld, r, x0, X, XT, CK, SWF, GF)                                                            \
  TR_EIDX(XT, CK, 1)                                                                                         \
  r[l] = 0.0f;                                                                                               \
  if (TR_XB(x0, x, XT, GF) < X && k0 + q < ke) {                                                             \
    pp = P + (CK ? (long)TR_XR(x0, x, XT, GF) * ld + (k0 + q) : (long)(k0 + q) * ld + (x0 + x));            \
    r[l] = SWF ? pp[0] / (1.0f + exp(-pp[0])) * pp[so] : pp[0];                                             \
  }
#define TR_VSTAGE(S, SX, r, XT, CK)                                                                            \
  TR_EIDX(XT, CK, 4)                                                                                         \
  if (CK) {                                                                                                  \
    S[(4 * q) * SX + x] = r[4 * l], S[(4 * q + 1) * SX + x] = r[4 * l + 1];                                \
    S[(4 * q + 2) * SX + x] = r[4 * l + 2], S[(4 * q + 3) * SX + x] = r[4 * l + 3];                        \
  } else {                                                                                                   \
    TR_ST4(S, q * SX + 4 * x, r, l)                                                                        \
  }
#define TR_SSTAGE(S, SX, r, XT, CK)                                                                            \
  TR_EIDX(XT, CK, 1)                                                                                         \
  S[q * SX + x] = r[l];
#define TR_LDA4(p) (*(__global const float4 *)(p))
#define TR_LDU4(p) vload4(0, p)
#if TR_GPAD == 4
#define TR_ST4(S, o, r, l) *(__local float4 *)(S + (o)) = (float4)(r[4 * l], r[4 * l + 1], r[4 * l + 2], r[4 * l + 3]);
#else
#define TR_ST4(S, o, r, l) S[(o)] = r[4 * l], S[(o) + 1] = r[4 * l + 1], S[(o) + 2] = r[4 * l + 2], S[(o) + 3] = r[4 * l + 3];
#endif
/* One depth kk of the tile: a (WM) and b (WN) from local memory (TR_FRAG), WM x WN fma (TR_FMAS). */
#if TR_GEMM_VW == 4
#define TR_FRAG(kk, a, b)                                                                                      \
  _Pragma("unroll") for (i = 0; i < TR_GEMM_WM / 4; i++) {                                                 \
    float4 w = *(__local const float4 *)(As + (kk) * TR_SA + i * TR_RM * 4 + ty * 4);                    \
    a[4 * i] = w.s0, a[4 * i + 1] = w.s1, a[4 * i + 2] = w.s2, a[4 * i + 3] = w.s3;                      \
  }                                                                                                        \
  _Pragma("unroll") for (j = 0; j < TR_GEMM_WN / 4; j++) {                                                 \
    float4 w = *(__local const float4 *)(Bs + (kk) * TR_SB + j * TR_RN * 4 + tx * 4);                    \
    b[4 * j] = w.s0, b[4 * j + 1] = w.s1, b[4 * j + 2] = w.s2, b[4 * j + 3] = w.s3;                      \
  }
#else
#define TR_FRAG(kk, a, b)                                                                                      \
  _Pragma("unroll") for (i = 0; i < TR_GEMM_WM; i++) a[i] = As[(kk) * TR_SA + TR_ROWA(i)];                \
  _Pragma("unroll") for (j = 0; j < TR_GEMM_WN; j++) b[j] = Bs[(kk) * TR_SB + TR_COLB(j)];
#endif
#define TR_FMAS(a, b)                                                                                          \
  _Pragma("unroll") for (i = 0; i < TR_GEMM_WM; i++)                                                       \
  _Pragma("unroll") for (j = 0; j < TR_GEMM_WN; j++) c[i][j] = fma(a[i], b[j], c[i][j]);
#define TR_KSTEP(kk)                                                                                           \
  {                                                                                                          \
    float a[TR_GEMM_WM], b[TR_GEMM_WN];                                                                    \
    TR_FRAG(kk, a, b)                                                                                      \
    TR_FMAS(a, b)                                                                                          \
  }
/* C (=|+=) the work-item's outputs c: rows m0 + TR_ROWA(i) < M, columns n0 + TR_COLB(j) < N. */
#if TR_GEMM_VW == 4
#define TR_CSTORE                                                                                              \
  _Pragma("unroll") for (i = 0; i < TR_GEMM_WM; i++) {                                                       \
    const int m = m0 + TR_ROWA(i);                                                                           \
    if (m < M) {                                                                                             \
      __global float *cr = C + (long)m * ldc;                                                                \
      _Pragma("unroll") for (j = 0; j < TR_GEMM_WN; j += 4) {                                                \
        const int n = n0 + TR_COLB(j);                                                                       \
        if ((al & 4) && n + 3 < N) { /* C rows 16-byte aligned: one float4 store */                          \
          float4 o = (float4)(c[i][j], c[i][j + 1], c[i][j + 2], c[i][j + 3]);                               \
          if (acc) o = *(__global float4 *)(cr + n) + o;                                                     \
          *(__global float4 *)(cr + n) = o;                                                                  \
        } else {                                                                                             \
          for (l = 0; l < 4; l++)                                                                            \
            if (n + l < N) cr[n + l] = acc ? cr[n + l] + c[i][j + l] : c[i][j + l];                          \
        }                                                                                                    \
      }                                                                                                      \
    }                                                                                                        \
  }
#else
#define TR_CSTORE                                                                                              \
  _Pragma("unroll") for (i = 0; i < TR_GEMM_WM; i++) {                                                       \
    const int m = m0 + TR_ROWA(i);                                                                           \
    if (m < M) {                                                                                             \
      __global float *cr = C + (long)m * ldc;                                                                \
      _Pragma("unroll") for (j = 0; j < TR_GEMM_WN; j++) {                                                   \
        const int n = n0 + TR_COLB(j);                                                                       \
        if (n < N) cr[n] = acc ? cr[n] + c[i][j] : c[i][j];                                                  \
      }                                                                                                      \
    }                                                                                                        \
  }
#endif
/* GU: act = silu(gate) * up to X (and the gate_up to C when wc) from the registers: rows i and i + WM/2 of a
 work-item's block are a gate row and its up (tile rows x and x + TM/2). */
#if TR_GEMM_VW == 4
#define TR_GU4                                                                                                 \
  if ((al & 12) == 12 && n + 3 < N) { /* X and C rows 16-byte aligned: float4 stores */                      \
    const float4 g = (float4)(c[i][j], c[i][j + 1], c[i][j + 2], c[i][j + 3]);                               \
    const float4 u = (float4)(c[iu][j], c[iu][j + 1], c[iu][j + 2], c[iu][j + 3]);                           \
    *(__global float4 *)xr = g / (1.0f + exp(-g)) * u;                                                       \
    if (wc) *(__global float4 *)gr = g, *(__global float4 *)ur = u;                                          \
    continue;                                                                                                \
  }
#else
#define TR_GU4
#endif
#define TR_GUSTORE                                                                                             \
  _Pragma("unroll") for (i = 0; i < TR_GEMM_WM / 2; i++)                                                     \
  _Pragma("unroll") for (j = 0; j < TR_GEMM_WN; j += TR_GEMM_VW) {                                           \
    const int m = m0 + TR_ROWA(i), n = n0 + TR_COLB(j), iu = i + TR_GEMM_WM / 2;                             \
    __global float *xr = X + (long)m * ldx + n, *gr = C + (long)m * ldc + n, *ur = gr + gh * ldc;            \
    if (m >= M) continue;                                                                                    \
    TR_GU4                                                                                                   \
    for (l = 0; l < TR_GEMM_VW; l++)                                                                         \
      if (n + l < N) {                                                                                       \
        const float g = c[i][j + l], u = c[iu][j + l];                                                       \
        xr[l] = g / (1.0f + exp(-g)) * u;                                                                    \
        if (wc) gr[l] = g, ur[l] = u;                                                                        \
      }                                                                                                      \
  }
/* Both SGEMM bodies: the work-item (tid; tx, ty in the output grid, WL: 4 x 8 per warp), the tile's first column
 n0 and row m0 (GU: C's rows are gate | up halves `gh` apart, a tile holds TM/2 of each, M counts the gate rows),
 and the (batch, k-tile) sequence of group z: batches [b0, b1), depths [kb, ke) in ntk tiles, nt tiles in all. */
#define TR_GEMM_TILE_INDEX                                                                                     \
  const int tid = get_local_id(1) * TR_RN + get_local_id(0);                                                 \
  const int tx = WL ? ((tid >> 5) % (TR_RN / 8)) * 8 + (tid & 7) : (int)get_local_id(0);                     \
  const int ty = WL ? ((tid >> 5) / (TR_RN / 8)) * 4 + ((tid >> 3) & 3) : (int)get_local_id(1);              \
  const int n0 = get_group_id(0) * TR_GEMM_TN, m0 = get_group_id(1) * (GU ? TR_GEMM_TM / 2 : TR_GEMM_TM);   \
  const int bz = z / ks, kz = z - bz * ks;                                                                   \
  const int b0 = bz * bpg, b1 = min(nb, b0 + bpg), kb = kz * kc, ke = min(K, kb + kc);                       \
  const int ntk = ke > kb ? (ke - kb + TR_GEMM_TK - 1) / TR_GEMM_TK : 0;                                     \
  const int nt = (b1 > b0 ? b1 - b0 : 0) * ntk;
/* cp.async (TR_GEMM_CP: NVIDIA sm_80+, inline PTX): tiles go from global to local memory without registers.
 TR_CP4 / TR_CP16 copy 4 / 16 bytes of which n are read, the rest zero-filled (n = 0: an element out of range). */
#ifndef TR_GEMM_ST
#define TR_GEMM_ST 2
#endif
#if TR_GEMM_CP == 1
#define TR_CP4(dst, src, n) __asm__ volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"((uint)(ulong)(dst)), "l"(src), "r"(n) : "memory")
#define TR_CP16(dst, src, n) __asm__ volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"((uint)(ulong)(dst)), "l"(src), "r"(n) : "memory")
#define TR_CPCOMMIT() __asm__ volatile("cp.async.commit_group;" ::: "memory")
/* wait until at most ST - 2 groups (the tiles after the next one) are still in flight */
#if TR_GEMM_ST == 2
#define TR_CPWAIT() __asm__ volatile("cp.async.wait_group 0;" ::: "memory")
#elif TR_GEMM_ST == 3
#define TR_CPWAIT() __asm__ volatile("cp.async.wait_group 1;" ::: "memory")
#else
#define TR_CPWAIT() __asm__ volatile("cp.async.wait_group 2;" ::: "memory")
#endif
#else /* 2 (tests, any device): the same staging with plain loads and stores */
#define TR_CP4(dst, src, n) (*(dst) = (n) ? *(src) : 0.0f)
#define TR_CP16(dst, src, n) (*(__local float4 *)(dst) = (n) ? *(__global const float4 *)(src) : (float4)(0.0f))
#define TR_CPCOMMIT()
#define TR_CPWAIT()
#endif
/* local buffers of a kernel: ST for the cp.async ones, 2 for the others */
#define TR_NBUF(CPA) ((CPA) ? TR_GEMM_ST : 2)
/* C_z (=|+=) sum over batches b in group z of op(A_b) op(B_b), depth range [kz*kc, kz*kc+kc) of K.
 z = z0 + group(2) = bz * ks + kz; batches [bz*bpg, bz*bpg+bpg) & [0, nb). Output C + z*sC.
 TA, TB: compile-time constants (one kernel per case). */
static inline void tr_sgemm(__global const float *A, long lda, long sA, __global const float *B, long ldb, long sB,
              __global float *C, long ldc, int M, int N, int K, int acc, int nb, int bpg, int ks, int kc,
              int z, int al, __local float *As0, __local float *Bs0, const int TA, const int TB,
              const int WL, const int DB, const int KT, const int UV, const int SW, long so, const int GU, long gh,
              __global float *X, long ldx, int wc) {
  TR_GEMM_TILE_INDEX
  /* float4 fetches: the tile is interior along x (and k, checked per tile) and A / B rows 16-byte aligned */
  /* 1: aligned float4; 2 (UV): rows not 16-byte aligned, vload4 */
  const int va = TR_VLA > 0 && (UV || (al & 1)) && m0 + (GU ? TR_GEMM_TM / 2 : TR_GEMM_TM) <= M ? ((al & 1) ? 1 : 2) : 0;
  const int vb = TR_VLB > 0 && (UV || (al & 2)) && n0 + TR_GEMM_TN <= N ? ((al & 2) ? 1 : 2) : 0;
  float c[TR_GEMM_WM][TR_GEMM_WN], ra[TR_LA], rb[TR_LB];
  float4 v;
  int i, j, l, t, e, q, x, k0, fa = 0, fb = 0, kf = 0, kn = 0;
  __global const float *Ab, *Bb, *pp;
#pragma unroll
  for (i = 0; i < TR_GEMM_WM; i++)
#pragma unroll
    for (j = 0; j < TR_GEMM_WN; j++) c[i][j] = 0.0f;
  for (t = -1; t < nt; t++) {
    __local float *As = As0, *Bs = Bs0;
    if (DB) As += (t & 1) * TR_ASZ, Bs += (t & 1) * TR_BSZ;
    if (t >= 0) { /* stage the registers fetched last round */
      if (!DB && t > 0) barrier(CLK_LOCAL_MEM_FENCE);
      kn = kf; /* KT: depth of this tile, TK or less for the last of a range */
      if (fa) {
#pragma unroll
        for (l = 0; l < TR_VLA; l++) { TR_VSTAGE(As, TR_SA, ra, TR_GEMM_TM, !TA) }
      } else {
#pragma unroll
        for (l = 0; l < TR_LA; l++) { TR_SSTAGE(As, TR_SA, ra, TR_GEMM_TM, !TA) }
      }
      if (fb) {
#pragma unroll
        for (l = 0; l < TR_VLB; l++) { TR_VSTAGE(Bs, TR_SB, rb, TR_GEMM_TN, TB) }
      } else {
#pragma unroll
        for (l = 0; l < TR_LB; l++) { TR_SSTAGE(Bs, TR_SB, rb, TR_GEMM_TN, TB) }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t + 1 < nt) { /* fetch the next tile into registers while this one is computed */
      const int tb_ = (t + 1) / ntk;
      k0 = kb + ((t + 1) - tb_ * ntk) * TR_GEMM_TK;
      Ab = A + (long)(b0 + tb_) * sA, Bb = B + (long)(b0 + tb_) * sB;
      if (KT) kf = min(TR_GEMM_TK, ke - k0);
      fa = k0 + TR_GEMM_TK <= ke ? va : 0, fb = k0 + TR_GEMM_TK <= ke ? vb : 0;
      if (fa == 1) {
#pragma unroll
        for (l = 0; l < TR_VLA; l++) { TR_VFETCH(Ab, lda, ra, m0, TR_GEMM_TM, !TA, TR_LDA4, SW == 1, GU) }
      } else if (UV && fa) {
#pragma unroll
        for (l = 0; l < TR_VLA; l++) { TR_VFETCH(Ab, lda, ra, m0, TR_GEMM_TM, !TA, TR_LDU4, SW == 1, GU) }
      } else {
#pragma unroll
        for (l = 0; l < TR_LA; l++) { TR_SFETCH(Ab, lda, ra, m0, M, TR_GEMM_TM, !TA, SW == 1, GU) }
      }
      if (fb == 1) {
#pragma unroll
        for (l = 0; l < TR_VLB; l++) { TR_VFETCH(Bb, ldb, rb, n0, TR_GEMM_TN, TB, TR_LDA4, SW == 2, 0) }
      } else if (UV && fb) {
#pragma unroll
        for (l = 0; l < TR_VLB; l++) { TR_VFETCH(Bb, ldb, rb, n0, TR_GEMM_TN, TB, TR_LDU4, SW == 2, 0) }
      } else {
#pragma unroll
        for (l = 0; l < TR_LB; l++) { TR_SFETCH(Bb, ldb, rb, n0, N, TR_GEMM_TN, TB, SW == 2, 0) }
      }
    }
    if (t >= 0) {
      int kk;
      if (!KT || kn == TR_GEMM_TK) {
#pragma unroll
        for (kk = 0; kk < TR_GEMM_TK; kk++) { TR_KSTEP(kk) }
      } else { /* the last tile of a range: only its kn depths (the rest are zeros in both tiles) */
#pragma unroll 1
        for (kk = 0; kk < kn; kk++) { TR_KSTEP(kk) }
      }
    }
  }
  if (GU) {
    TR_GUSTORE
    return;
  }
  TR_CSTORE
}
/* cp.async staging of one operand's tile (XT x TK of P from x0, depths k0..) into S[k][x] (pitch SX). A k-contiguous
 operand (CK) is copied 4 bytes at a time, 8 depths (one 32-byte sector) x NT/8 rows per pass: whole sectors, and
 no bank conflicts at pitch XT + 4; a k-major one 16 bytes at a time where its rows are 16-byte aligned (v) and the
 tile is interior along x, else 4. Out-of-range elements are zero-filled by the copy (no other path for edges).
 Each work-item's elements are a fixed pattern of offsets from one address (the host checks that NT divides into
 the passes: tr__cl_gemm_cp_ok), so the per-tile cost is an add per copy. GU (A of a gate_up product, CK): the
 tile's second half of rows are the ups of the first, gh rows further. */
#define TR_CQ (TR_GEMM_TK % 8 == 0 ? 8 : TR_GEMM_TK)
#define TR_CPLOOP(N1, N2, DST, SRC, BYTES, OK)                                                                 \
  if (full) {                                                                                                \
    _Pragma("unroll") for (i1 = 0; i1 < (N1); i1++)                                                          \
    _Pragma("unroll") for (i2 = 0; i2 < (N2); i2++) TR_CPn(BYTES, DST, SRC, BYTES);                          \
  } else {                                                                                                   \
    _Pragma("unroll") for (i1 = 0; i1 < (N1); i1++)                                                          \
    _Pragma("unroll") for (i2 = 0; i2 < (N2); i2++) {                                                        \
      const int ok_ = OK;                                                                                    \
      TR_CPn(BYTES, DST, ok_ ? SRC : P, ok_ ? BYTES : 0);                                                    \
    }                                                                                                        \
  }
#define TR_CPn(b, d, s, n) TR_CP##b(d, s, n)
#define TR_GUP(i2) (GU && (i2) >= H ? (i2) - H : (i2))
static inline void tr_cp_tile(__global const float *P, long ld, __local float *S, const int SX, const int XT, const int CK,
                              int x0, int X, int k0, int ke, int v, int tid, const int GU, long gh) {
  const int full = x0 + (GU ? XT / 2 : XT) <= X && k0 + TR_GEMM_TK <= ke;
  int i1, i2;
  if (CK) { /* i1: depth block of CQ, i2: row pass of NT / CQ rows */
    const int RP = TR_NT / TR_CQ, r = tid / TR_CQ, qq = tid % TR_CQ, H = XT / RP / 2;
    const long gl = gh * ld;
    __global const float *p = P + (long)(x0 + r) * ld + (k0 + qq);
    __local float *s = S + qq * SX + r;
    TR_CPLOOP(TR_GEMM_TK / TR_CQ, XT / RP, s + i1 * TR_CQ * SX + i2 * RP,
              p + TR_GUP(i2) * (RP * ld) + (GU && i2 >= H ? gl : 0) + i1 * TR_CQ, 4,
              x0 + r + TR_GUP(i2) * RP < X && k0 + qq + i1 * TR_CQ < ke)
  } else if (v && x0 + XT <= X) { /* i2: depth pass of NT / (XT / 4) rows, float4 columns */
    const int RQ = TR_NT / (XT / 4), c = tid % (XT / 4), q = tid / (XT / 4);
    __global const float *p = P + (long)(k0 + q) * ld + (x0 + 4 * c);
    __local float *s = S + q * SX + 4 * c;
    TR_CPLOOP(1, TR_GEMM_TK / RQ, s + i2 * RQ * SX, p + i2 * (RQ * ld), 16, k0 + q + i2 * RQ < ke)
  } else {
    const int RQ = TR_NT / XT, c = tid % XT, q = tid / XT;
    __global const float *p = P + (long)(k0 + q) * ld + (x0 + c);
    __local float *s = S + q * SX + c;
    TR_CPLOOP(1, TR_GEMM_TK / RQ, s + i2 * RQ * SX, p + i2 * (RQ * ld), 4, x0 + c < X && k0 + q + i2 * RQ < ke)
  }
}
/* tr_sgemm with every tile staged by cp.async, TR_GEMM_ST buffers deep: the copies of tile u = t + ST - 1 are in
 flight while tile t is multiplied, one barrier per tile. Same grid, outputs and accumulation order as tr_sgemm.
 Tiles run over (batch, depth) in order; counters instead of divisions (a division per tile was visible). */
static inline void tr_sgemm_cp(__global const float *A, long lda, long sA, __global const float *B, long ldb, long sB,
              __global float *C, long ldc, int M, int N, int K, int acc, int nb, int bpg, int ks, int kc, int z, int al,
              __local float *As0, __local float *Bs0, const int TA, const int TB, const int WL, const int KT,
              const int GU, long gh, __global float *X, long ldx, int wc) {
  TR_GEMM_TILE_INDEX
  float c[TR_GEMM_WM][TR_GEMM_WN];
  int i, j, l, u, ib = b0, ik = kb, is = 0, ck = kb, cs = 0, kn = TR_GEMM_TK;
#pragma unroll
  for (i = 0; i < TR_GEMM_WM; i++)
#pragma unroll
    for (j = 0; j < TR_GEMM_WN; j++) c[i][j] = 0.0f;
  for (u = 0; u < nt + TR_GEMM_ST - 1; u++) { /* copy tile u (batch ib, depth ik, buffer is), multiply tile u - (ST - 1) */
    if (u >= TR_GEMM_ST - 1) { /* that tile has landed (each work-item waits for its copies); the one before is done */
      TR_CPWAIT();
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (u < nt) {
      tr_cp_tile(A + (long)ib * sA, lda, As0 + is * TR_ASZ, TR_SA, TR_GEMM_TM, !TA, m0, M, ik, ke, al & 1, tid, GU, gh);
      tr_cp_tile(B + (long)ib * sB, ldb, Bs0 + is * TR_BSZ, TR_SB, TR_GEMM_TN, TB, n0, N, ik, ke, al & 2, tid, 0, 0);
      ik += TR_GEMM_TK;
      if (ik >= ke) ik = kb, ib++;
      is = is + 1 == TR_GEMM_ST ? 0 : is + 1;
    }
    TR_CPCOMMIT();
    if (u >= TR_GEMM_ST - 1) {
      __local const float *As = As0 + cs * TR_ASZ, *Bs = Bs0 + cs * TR_BSZ;
      int kk;
      if (KT) kn = min(TR_GEMM_TK, ke - ck); /* the last tile of a range: only its depth */
      if (kn == TR_GEMM_TK) {
#pragma unroll
        for (kk = 0; kk < TR_GEMM_TK; kk++) { TR_KSTEP(kk) }
      } else {
#pragma unroll 1
        for (kk = 0; kk < kn; kk++) { TR_KSTEP(kk) }
      }
      ck += TR_GEMM_TK;
      if (ck >= ke) ck = kb;
      cs = cs + 1 == TR_GEMM_ST ? 0 : cs + 1;
    }
  }
  if (GU) {
    TR_GUSTORE
  } else {
    TR_CSTORE
  }
}
#define TR_SGEMM_K(T, TA, TB, WL, DB, KT, UV, SW, GU, CPA)                                                                              \
  __kernel __attribute__((reqd_work_group_size(TR_RN, TR_RM, 1))) void TR_GNAME(T, TR_GEMM_TM, TR_GEMM_TN, TR_GEMM_TK,  \
    TR_GEMM_WM, TR_GEMM_WN, TR_GEMM_VW)(__global const float *A, ulong A_off, long lda, long sA,                   \
    __global const float *B, ulong B_off, long ldb, long sB, __global float *C, ulong C_off, long ldc, long sC,     \
    int M, int N, int K, int acc, int nb, int bpg, int ks, int kc, int z0, long so, long gh,                      \
    __global float *X, ulong X_off, long ldx, long sx, int wc) {                                                    \
    __local float4 As4[(TR_NBUF(CPA) * TR_ASZ + 3) / 4], Bs4[(TR_NBUF(CPA) * TR_BSZ + 3) / 4];                                                     \
    const int z = z0 + get_group_id(2);                                                                             \
    const ulong co = C_off + (ulong)z * (ulong)sC;                                                                  \
    const ulong sa = SW == 1 ? (ulong)so : 0, sb = SW == 2 ? (ulong)so : 0;                                         \
    const int al = (((A_off | (ulong)lda | (ulong)sA | sa) & 3) == 0) | ((((B_off | (ulong)ldb | (ulong)sB | sb) & 3) == 0) << 1) | \
           ((((co | (ulong)ldc | (ulong)gh) & 3) == 0) << 2) | ((((X_off + (ulong)z * (ulong)sx) | (ulong)ldx) & 3) == 0) << 3; \
    if (CPA)                                                                                                        \
      tr_sgemm_cp(A + A_off, lda, sA, B + B_off, ldb, sB, C + co, ldc, M, N, K, acc, nb, bpg, ks, kc, z, al,        \
          (__local float *)As4, (__local float *)Bs4, TA, TB, TR_WL(WL), KT, GU, gh, X + X_off + (ulong)z * (ulong)sx, ldx, wc); \
    else                                                                                                            \
      tr_sgemm(A + A_off, lda, sA, B + B_off, ldb, sB, C + co, ldc, M, N, K, acc, nb, bpg, ks, kc, z, al,           \
          (__local float *)As4, (__local float *)Bs4, TA, TB, TR_WL(WL), TR_DB(DB), KT, UV, SW, so, GU, gh,         \
          X + X_off + (ulong)z * (ulong)sx, ldx, wc);                                                               \
  }
/* The kernels. TR_MMA_ONLY: the tensor-core program (tr__cl_mma_ready), which has only tr_k_hmma_* and tr_k_pack16. */
#ifndef TR_MMA_ONLY
/* KT (short last k-tile computed to its depth) and UV (vload4 for unaligned rows) only where measured faster on
 the H200: nn (K = 97 token mix, lda = 97: +11%); elsewhere they cost ~2% through code generation. */
TR_SGEMM_K(nn, 0, 0, 1, 0, 1, 1, 0, 0, 0)
TR_SGEMM_K(nt, 0, 1, 0, 1, 0, 0, 0, 0, 0)
TR_SGEMM_K(tn, 1, 0, 1, 0, 0, 0, 0, 0, 0)
TR_SGEMM_K(tt, 1, 1, 0, 1, 0, 0, 0, 0, 0)
/* The token mix's SwiGLU fused into the products around it. nn_gu: W_tgu . x_b writes act = silu(gate) * up from
 its registers (gate | up rows). nt_swb: the weight gradient's B operand is read as silu(gate) * up. (The same
 fusions of the channel SwiGLU were slower on the H200 than the elementwise pass they save: registers.) */
#if (TR_GEMM_VW == 4 && TR_GEMM_WM % 8 == 0) || (TR_GEMM_VW == 1 && TR_GEMM_WM % 2 == 0)
TR_SGEMM_K(nn_gu, 0, 0, 1, 0, 1, 1, 0, 1, 0)
#endif
TR_SGEMM_K(nt_swb, 0, 1, 0, 1, 0, 0, 2, 0, 0)
/* cp.async staging (NVIDIA sm_80+): the plain cases; WL per case as measured on the H200 */
#if TR_GEMM_CP
TR_SGEMM_K(nn_cp, 0, 0, 1, 1, 1, 0, 0, 0, 1)
TR_SGEMM_K(nt_cp, 0, 1, 1, 1, 0, 0, 0, 0, 1)
TR_SGEMM_K(tn_cp, 1, 0, 1, 1, 0, 0, 0, 0, 1)
TR_SGEMM_K(tt_cp, 1, 1, 1, 1, 0, 0, 0, 0, 1)
#if TR_GEMM_VW == 4 && TR_GEMM_WM % 8 == 0 && (TR_GEMM_TM / 2) % (TR_NT / TR_CQ) == 0 /* = tr__cl_gemm_gu_cp_ok */
TR_SGEMM_K(nn_gu_cp, 0, 0, 1, 1, 1, 0, 0, 1, 1)
#endif
#endif
#endif /* TR_MMA_ONLY */
/* Tensor cores (TR_GEMM_MMA: 1 = inline-PTX cp.async, ldmatrix and mma.sync on NVIDIA sm_80+; 2 = the same tiles,
 staging and epilogue with plain copies and fma, so that they are tested on any device). For models computing in
 bfloat16 / float16, whose GEMM operands are values of that type: tr_k_pack16 converts each operand once (round to
 nearest even, exact for such values) to rows of 16-bit values along the depth, then tr_k_hmma multiplies them. Built
 in a program of their own (TR_MMA_ONLY), at the first such product. */
#ifdef TR_GEMM_MMA
#define TR_MT 128 /* the packing's unit of rows (tr__cl_packed_of pads to it) */
#define TR_MK 32  /* tile depth, and the packing's unit of columns */
/* tr_k_hmma's tile (the host's tr__cl_gemm_cfg hm, hn, hw, hs): TR_HM x TR_HN of C, warps of 64 x TR_HW, TR_HS stages */
#ifndef TR_HM
#define TR_HM 128
#endif
#ifndef TR_HN
#define TR_HN 128
#endif
#ifndef TR_HW
#define TR_HW 32
#endif
#ifndef TR_HS
#define TR_HS 3
#endif
#define TR_HWN (TR_HN / TR_HW)        /* warps along a tile's columns */
#define TR_HNT (32 * (TR_HM / 64) * TR_HWN) /* work-items */
#define TR_HNF (TR_HW / 8)            /* a warp's n8 fragments */
#ifndef TR_WG
#define TR_WG 0 /* 1: the products on wgmma (below) */
#endif
#define TR_WG_OK (TR_WG && TR_HM == 128 && TR_HN == 128 && TR_HW == 32)
#define TR_WG_AL __attribute__((aligned(1024))) /* (the 128-byte swizzle's atoms start on 1024 bytes) */
/* lo, hi as one word (lo in the low half: the lower depth, as the fragments hold them) */
static inline uint tr_mma_pack(float lo, float hi, const int F16) {
#if TR_GEMM_MMA == 1
  uint r;
  if (F16) __asm__("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else __asm__("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else /* the tape's conversion (ops.cl): x rounded by tr_round1, the one rounding rule, repacked exactly */
  return (uint)tr_half1(lo, F16 ? 2 : 1) | (uint)tr_half1(hi, F16 ? 2 : 1) << 16;
#endif
}
/* c (+)= a b for one m16n8k16 fragment: a = rows g, g + 8 at depth pairs q, q + 4 (4 words), b = column g at q, q + 4 */
#if TR_GEMM_MMA == 1
#define TR_MMA_BF16 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#define TR_MMA_F16 "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#define TR_MMA_OPS "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
#define TR_MMA_ARGS(c, a, b) \
  : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3]) \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3])
#endif
/* both values rounded to bfloat16 (rnd 1) / float16 (2), as tr_k_round would */
static inline float2 tr_round2(float2 v, int rnd) { return (float2)(tr_round1(v.s0, rnd), tr_round1(v.s1, rnd)); }
/* v rounded to float16 (F16) or bfloat16, as tr_round2 would, and *w those two values as tr_mma_pack's word: the
 pack rounds both (on NVIDIA one cvt, to nearest even as tr_round1, a NaN's payload aside), and the values are read
 back from its word. The precision is a constant and there are no branches: the epilogues measured slower with
 tr_round1 of a precision passed at run time. */
static inline float2 tr_mma_round2w(float2 v, const int F16, uint *w) {
  const uint r = tr_mma_pack(v.s0, v.s1, F16);
  *w = r;
#if TR_GEMM_MMA == 1
  if (F16) {
    float lo, hi;
    __asm__("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }" : "=f"(lo), "=f"(hi) : "r"(r));
    return (float2)(lo, hi);
  }
  return (float2)(as_float(r << 16), as_float(r & 0xffff0000u));
#else
  return (float2)(tr_unhalf1((ushort)r, F16 ? 2 : 1), tr_unhalf1((ushort)(r >> 16), F16 ? 2 : 1));
#endif
}
/* silu(gate) * up of two values in the precision (F16: float16, else bfloat16) as tr_swiglu1 computes it, and *w
 the result's word */
static inline float2 tr_mma_swiglu2w(float2 gate, float2 up, const int F16, uint *w) {
  uint ws;
  const float2 s = tr_mma_round2w((float2)(tr_silu1(gate.s0), tr_silu1(gate.s1)), F16, &ws);
  return tr_mma_round2w(s * up, F16, w);
}
/* v at p = row + col, col < n of a row: a float2 where v8 (8-byte aligned rows) and both are in */
static inline void tr_mma_put2(__global float *p, int col, int n, float2 v, int v8) {
  if (col + 1 < n && v8) *(__global float2 *)p = v;
  else {
    if (col < n) p[0] = v.s0;
    if (col + 1 < n) p[1] = v.s1;
  }
}
/* The tensor-core kernels' epilogue: a warp's 64 x 32 block of C at rows mw.., columns nw.. (+)= its fragments c,
 with rnd rounded to the precision of the operands (F16: float16, else bfloat16) after the accumulation, as
 tr_k_round would; c8: C's rows start 8-byte aligned. c16 (with rnd): C = the rounded values as 16 bits
 (tr_mma_pack's: exact, as the tape's for all but a NaN's payload; pairs of columns as words; ldc and N even, no
 acc). */
static inline void tr_mma_store(__global float *C, long ldc, int M, int N, int mw, int nw, int rs, int cs, int g, int q, int acc, int c8, int rnd,
                                int c16, const int F16, float c[4][TR_HNF][4]) {
  int i, j, r;
#pragma unroll
  for (i = 0; i < 4; i++)
#pragma unroll
    for (r = 0; r < 2; r++) {
      const int m = mw + i * rs + g + r * 8;
      __global float *cr = C + (long)m * ldc;
      if (m >= M) continue;
#pragma unroll
      for (j = 0; j < TR_HNF; j++) {
        const int n = nw + i * cs + j * 8 + 2 * q;
        float2 v = (float2)(c[i][j][2 * r], c[i][j][2 * r + 1]);
        uint w;
        if (acc) v += c8 && n + 1 < N ? *(__global float2 *)(cr + n) : (float2)(n < N ? cr[n] : 0.0f, n + 1 < N ? cr[n + 1] : 0.0f); /* n is even */
        if (rnd || c16) v = tr_mma_round2w(v, F16, &w); /* (c16: the word, rounded as the pack rounds) */
        if (c16) {
          if (n < N) ((__global uint *)C)[(m * ldc + n) / 2] = w;
        } else
          tr_mma_put2(cr + n, n, N, v, c8);
      }
    }
}
/* The SwiGLU's epilogue (tr_k_hmma_swiglu_*): C's gate and up halves were packed in alternating blocks of 8 rows of
 the weight operand (tr_k_pack16's il), so that a work-item holds a gate and its up for two adjacent columns. Each
 value is rounded as tr_mma_store would, act = silu(gate) * up as tr_k_swiglu_fwd computes it, and C gets the gates
 and the ups at their places only with keep (a pass without the tape never reads them): keep 1 as floats, keep 2 as
 16-bit values (C then holds them, ldc of them a row, as the 16-bit tape does: pairs of columns as words, ldc and the
 halves even). c8: C's rows and halves start 8-byte aligned (float2 stores).
 swr 1 (the token mix: halves of M / 2 rows, A's rows interleaved): a fragment's rows g and g + 8 hold the gates and
 the ups of the same row; act is rows x N (ld_act, a8 as c8), or with kpa > 0 written only packed for the next
 product (its depth-major B: rows of kpa 16-bit values, ld16 words; the columns past N come out 0 from the zero-padded
 operand, rows past M / 2 are not written: the next product reads no depth past them).
 swr 0 (the channel SwiGLU: halves of N / 2 columns, B's rows interleaved): fragments j and j + 1 (j even) hold those
 of the same 8 columns; act is written only packed for the next product (tr_k_hmma's A), as a16's rows of kpa 16-bit
 values (ld16 words), every row of the tile: past the operands' rows and columns their packing holds zeros, so act
 is 0 there, as a packed operand's padding must be. */
static inline void tr_mma_store_swiglu(__global float *C, long ldc, __global float *act, long ld_act, int M, int N, int swr, int keep, int a8,
                                       int c8, __global uint *a16, long ld16, int kpa, int mw, int nw, int rs, int cs, int g, int q, const int F16,
                                       float c[4][TR_HNF][4]) {
  __global uint *c16 = (__global uint *)C; /* (keep 2) */
  int i, j, r;
  uint wgate, wup, wact; /* the words of gate, up and act */
#define TR_RND2(x, y, w) tr_mma_round2w((float2)(x, y), F16, &w)
  if (swr) {
#pragma unroll
    for (i = 0; i < 4; i++) {
      const long hx = (mw + i * rs) / 2 + g;
      if (hx >= M / 2) continue;
#pragma unroll
      for (j = 0; j < TR_HNF; j++) {
        const int n = nw + i * cs + j * 8 + 2 * q;
        const float2 gate = TR_RND2(c[i][j][0], c[i][j][1], wgate), up = TR_RND2(c[i][j][2], c[i][j][3], wup), v = tr_mma_swiglu2w(gate, up, F16, &wact);
        if (!kpa) tr_mma_put2(act + hx * ld_act + n, n, N, v, a8);
        else if (n < kpa) a16[hx * ld16 + n / 2] = wact;
        if (keep == 2 && n < N) c16[(hx * ldc + n) / 2] = wgate, c16[((hx + M / 2) * ldc + n) / 2] = wup;
        else if (keep == 1) tr_mma_put2(C + hx * ldc + n, n, N, gate, c8), tr_mma_put2(C + (hx + M / 2) * ldc + n, n, N, up, c8);
      }
    }
  } else
#pragma unroll
    for (i = 0; i < 4; i++)
#pragma unroll
      for (r = 0; r < 2; r++) {
        const long m = mw + i * rs + g + r * 8;
#pragma unroll
        for (j = 0; j < TR_HNF; j += 2) {
          const int col = (nw + i * cs + j * 8) / 2 + 2 * q;
          const float2 gate = TR_RND2(c[i][j][2 * r], c[i][j][2 * r + 1], wgate), up = TR_RND2(c[i][j + 1][2 * r], c[i][j + 1][2 * r + 1], wup);
          const float2 v = tr_mma_swiglu2w(gate, up, F16, &wact);
          if (col < kpa && m < ((M + TR_MT - 1) & -TR_MT)) a16[m * ld16 + col / 2] = wact;
          if (keep == 2 && m < M && col < N / 2) c16[(m * ldc + col) / 2] = wgate, c16[(m * ldc + N / 2 + col) / 2] = wup;
          else if (keep == 1 && m < M) tr_mma_put2(C + m * ldc + col, col, N / 2, gate, c8), tr_mma_put2(C + m * ldc + N / 2 + col, col, N / 2, up, c8);
        }
      }
#undef TR_RND2
}
/* Tensor cores on 16-bit operands (tr_k_hmma_<bf16|f16>[_ta|_tb|_tab]): A and B packed by tr_k_pack16 as they are
 stored (rows padded to 128, columns to 32, zeros past the operand): C = op(A) op(B)^T. An operand is k-contiguous
 (its packed rows are its rows, along the depth) or, with TA / TB, depth-major (its packed rows are depths: a
 transposed operand, packed once and read either way). Each 128 x 32 tile is 8 KiB, copied with cp.async 16 bytes at
 a time into one of TR_HS stages (48 KiB in all), so that the copies of the next TR_HS - 1 tiles are in flight while
 one is multiplied; ldmatrix loads the fragments (.trans from a depth-major tile). A k-contiguous tile row is 4 chunks
 of 16 bytes, chunk c stored at c ^ ((row / 2) % 4); a depth-major one, 32 depths of 16 chunks, chunk c at c ^ (depth
 % 8): either way the 8 rows one ldmatrix reads hit 32 distinct banks. Tile TR_HM x TR_HN (default 128 x 128, 256
 work-items); warp w owns the 64 x TR_HW block of C at rows (w / (TR_HN / TR_HW)) * 64, columns (w % (TR_HN / TR_HW))
 * TR_HW, as 4 x TR_HW / 8 m16n8k16 fragments accumulated in fp32 (TR_WG: per warpgroup on wgmma, above). Same grid
 (batches, K pieces) and outputs as tr_sgemm. */
#define TR_HSW(r, c) ((r) * (TR_MK / 2) + ((((c) ^ ((r) >> 1)) & 3) << 2)) /* word of row r, chunk c of a tile */
/* of depth k, chunk c of a depth-major tile: planes of 64 columns (chunks 8 p..), each TR_MK depths of 128 bytes */
#define TR_HTW(k, c) (((c) >> 3) * (TR_MK * 32) + (k) * 32 + ((((c) ^ (k)) & 7) << 2))
#if TR_GEMM_MMA == 1
#define TR_HCP(dst, src, n) \
  __asm__ volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"((uint)(ulong)(dst)), "l"(src), "r"(n) : "memory")
#define TR_HCOMMIT() __asm__ volatile("cp.async.commit_group;" ::: "memory")
#if TR_HS == 2 /* TR_HS - 2 groups may stay in flight */
#define TR_HWAIT() __asm__ volatile("cp.async.wait_group 0;" ::: "memory")
#elif TR_HS == 3
#define TR_HWAIT() __asm__ volatile("cp.async.wait_group 1;" ::: "memory")
#else
#define TR_HWAIT() __asm__ volatile("cp.async.wait_group 2;" ::: "memory")
#endif
#define TR_LDM4(r0, r1, r2, r3, p) \
  __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"((uint)(ulong)(p)))
#define TR_LDM4T(r0, r1, r2, r3, p) \
  __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"((uint)(ulong)(p)))
/* Hopper's wgmma (TR_WG, sm_90a; the default tile only): NVIDIA's OpenCL C compiler targets sm_90, where ptxas refuses
 it, so its instructions are written as PTX comments ("//@ "), which the compiler passes through; the host uncomments
 them in the program's PTX and rebuilds it for sm_90a (tr__cl_wg_patch). A tile's operands are read from local memory
 as they are staged: TR_HSW's rows of 64 bytes, chunk c at c ^ ((row / 2) % 4), is the 64-byte swizzle of a K-major
 operand (atoms of 8 rows, 512 bytes apart); TR_HTW's planes of 64 columns, depth rows of 128 bytes with chunk c at
 c ^ (depth % 8), the 128-byte swizzle of an MN-major one (the instruction's transpose flag; atoms of 8 depths, 1024
 bytes apart, planes TR_WG_PLANE apart). Warpgroup w multiplies rows 64 w.. of A by all 128 rows of B, 16
 depths an instruction (m64n128k16), into c[J / 4][J % 4][r]: the accumulator's n8 block J (columns 8 J..) as
 mma.sync's fragments hold theirs (rows g, g + 8 of the warp's 16, columns 2 q, 2 q + 1). */
/* bytes of a warpgroup's 64 rows of a K-major tile, and of a depth-major tile's plane (TR_MK depths of 128 bytes) */
#define TR_WG_PLANE (64 * TR_MK * 2)
static inline ulong tr_wg_desc(uint addr, const int T) { /* start, leading offset, stride, swizzle: 64 bytes (K-major), 128 (T) */
  return (ulong)((addr & 0x3FFFF) >> 4) | ((ulong)(T ? TR_WG_PLANE >> 4 : 1) << 16) | ((ulong)((T ? 1024 : 512) >> 4) << 32) | ((T ? 1ul : 2ul) << 62);
}
/* wgmma's accumulator as asm operands: an asm that names them is ordered with the instructions that write them */
#define TR_WG_ACC(c) \
  "+f"(c[0][0][0]), "+f"(c[0][0][1]), "+f"(c[0][0][2]), "+f"(c[0][0][3]), "+f"(c[0][1][0]), "+f"(c[0][1][1]), "+f"(c[0][1][2]), "+f"(c[0][1][3]), "+f"(c[0][2][0]), "+f"(c[0][2][1]), "+f"(c[0][2][2]), "+f"(c[0][2][3]), "+f"(c[0][3][0]), "+f"(c[0][3][1]), "+f"(c[0][3][2]), "+f"(c[0][3][3]), \
  "+f"(c[1][0][0]), "+f"(c[1][0][1]), "+f"(c[1][0][2]), "+f"(c[1][0][3]), "+f"(c[1][1][0]), "+f"(c[1][1][1]), "+f"(c[1][1][2]), "+f"(c[1][1][3]), "+f"(c[1][2][0]), "+f"(c[1][2][1]), "+f"(c[1][2][2]), "+f"(c[1][2][3]), "+f"(c[1][3][0]), "+f"(c[1][3][1]), "+f"(c[1][3][2]), "+f"(c[1][3][3]), \
  "+f"(c[2][0][0]), "+f"(c[2][0][1]), "+f"(c[2][0][2]), "+f"(c[2][0][3]), "+f"(c[2][1][0]), "+f"(c[2][1][1]), "+f"(c[2][1][2]), "+f"(c[2][1][3]), "+f"(c[2][2][0]), "+f"(c[2][2][1]), "+f"(c[2][2][2]), "+f"(c[2][2][3]), "+f"(c[2][3][0]), "+f"(c[2][3][1]), "+f"(c[2][3][2]), "+f"(c[2][3][3]), \
  "+f"(c[3][0][0]), "+f"(c[3][0][1]), "+f"(c[3][0][2]), "+f"(c[3][0][3]), "+f"(c[3][1][0]), "+f"(c[3][1][1]), "+f"(c[3][1][2]), "+f"(c[3][1][3]), "+f"(c[3][2][0]), "+f"(c[3][2][1]), "+f"(c[3][2][2]), "+f"(c[3][2][3]), "+f"(c[3][3][0]), "+f"(c[3][3][1]), "+f"(c[3][3][2]), "+f"(c[3][3][3])
#define TR_WG_FENCE() __asm__ volatile("//@ wgmma.fence.sync.aligned;" ::: "memory")
#define TR_WG_COMMIT() __asm__ volatile("//@ wgmma.commit_group.sync.aligned;" ::: "memory")
#define TR_WG_WAIT(n) __asm__ volatile("//@ wgmma.wait_group.sync.aligned " #n ";" ::: "memory")
/* the last wait names the accumulator, so that no read of it is moved above the wait (ptxas would serialize the
 wgmma then: its note C7514) */
#define TR_WG_WAIT0_ACC(c) __asm__ volatile("//@ wgmma.wait_group.sync.aligned 0;" : TR_WG_ACC(c) :: "memory")
/* TY: the operands' type, TRA / TRB: "1" for an MN-major (depth-major) operand */
#define TR_WG_MMA(TY, TRA, TRB, c, da, db)                                                                              \
  __asm__ volatile("//@ { .reg .pred p; setp.ne.b32 p, %66, 0; wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY \
                   " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, " TRA ", " TRB "; }"                                                                \
                   : TR_WG_ACC(c)                                                                                  \
                   : "l"(da), "l"(db), "r"(1) : "memory")
#else /* 2: plain copies, and the fragments' values read one by one */
#define TR_HCP(dst, src, n) (*(__local uint4 *)(dst) = (n) ? *(__global const uint4 *)(src) : (uint4)(0))
#define TR_HCOMMIT()
#define TR_HWAIT()
#endif
/* the copies of tile (depths ik..) of a packed operand's rows x0.. (XT of them; zeros past its xp packed rows) or
 (depth-major T) of its columns x0.. (zeros past the 2 ld packed ones, so that no copy reads past the last row, and
 past depth K, where a packing written by its producer, tr_k_pack16_swiglu_bwd, has not zeroed its padding) into S:
 4 XT chunks of 16 bytes, e = tid, tid + TR_HNT, .. */
static inline void tr_hmma_copy(__local uint *S, __global const uint *P, long ld, int x0, int xp, int ik, int K, int tid, const int T, const int XT) {
  int l;
#pragma unroll
  for (l = 0; l < 4 * XT / TR_HNT; l++) {
    const int e = tid + l * TR_HNT;
    if (T) {
      const int k = e / (XT / 8), c = e % (XT / 8), in = x0 + 8 * c < 2 * ld && ik + k < K;
      TR_HCP(S + TR_HTW(k, c), in ? P + (long)(ik + k) * ld + x0 / 2 + 4 * c : P, in ? 16 : 0);
    } else {
      const int r = e >> 2, c = e & 3, in = XT <= TR_MT || x0 + r < xp;
      TR_HCP(S + TR_HSW(r, c), in ? P + (long)(x0 + r) * ld + ik / 2 + 4 * c : P, in ? 16 : 0);
    }
  }
}
/* tile u of nt (batch b0 + u / ntk, depths kb + (u % ntk) TR_MK..) of both operands into its stage, as one cp.async group */
static inline void tr_hmma_fetch(__local uint *As0, __local uint *Bs0, __global const uint *A, long lda, long sA, __global const uint *B, long ldb,
                                 long sB, int u, int nt, int ntk, int b0, int kb, int m0, int mp, int n0, int np, int K, int tid, const int TA,
                                 const int TB) {
  if (u < nt) {
    const int ib = b0 + u / ntk, ik = kb + (u % ntk) * TR_MK;
    tr_hmma_copy(As0 + (u % TR_HS) * (TR_HM * TR_MK / 2), A + (long)ib * sA, lda, m0, mp, ik, K, tid, TA, TR_HM);
    tr_hmma_copy(Bs0 + (u % TR_HS) * (TR_HN * TR_MK / 2), B + (long)ib * sB, ldb, n0, np, ik, K, tid, TB, TR_HN);
  }
  TR_HCOMMIT(); /* an empty group past the end keeps the count TR_HWAIT relies on */
}
#if TR_GEMM_MMA != 1
/* the 16-bit value at row r, depth k of a staged tile (T: a depth-major one), as a float */
static inline float tr_hmma_at(__local const uint *S, int r, int k, const int F16, const int T) {
  const uint w = T ? S[TR_HTW(k, r >> 3) + ((r & 7) >> 1)] >> (16 * (r & 1)) : S[TR_HSW(r, k >> 3) + ((k & 7) >> 1)] >> (16 * (k & 1));
  return tr_unhalf1((ushort)w, F16 ? 2 : 1);
}
#endif
static inline void tr_hmma(__global const uint *A, long lda, long sA, __global const uint *B, long ldb, long sB, __global float *C,
                           long ldc, int M, int N, int K, int Kp, int acc, int nb, int bpg, int ks, int kc, int z, int c8, __local uint *As0,
                           __local uint *Bs0, const int F16, int rnd, __global float *act, long ld_act, int swr, int keep,
                           __global uint *a16, long ld16, int kpa, const int TA, const int TB) {
  const int tid = get_local_id(0), g = (tid & 31) >> 2, q = tid & 3, wm = (tid >> 5) / TR_HWN * 64, wn = (tid >> 5) % TR_HWN * TR_HW;
  const int lr = tid & 7, lm = (tid >> 3) & 3; /* ldmatrix: the row and the matrix whose address this lane gives */
  /* the warp's accumulator: fragment (i, j) at the tile's rows mw + i rs.., columns nw + i cs + 8 j.. (mma.sync: its
     64 x TR_HW block; wgmma: its 16 rows of its warpgroup's 64, every column) */
  const int wg = TR_WG_OK, mw = wg ? (tid >> 7) * 64 + ((tid >> 5) & 3) * 16 : wm, nw = wg ? 0 : wn, rs = wg ? 0 : 16, cs = wg ? 32 : 0;
  const int n0 = get_group_id(0) * TR_HN, m0 = get_group_id(1) * TR_HM;
  const int mp = (M + TR_MT - 1) & -TR_MT, np = (N + TR_MT - 1) & -TR_MT; /* the packed rows */
  const int bz = z / ks, kz = z - bz * ks;
  const int b0 = bz * bpg, b1 = min(nb, b0 + bpg), kb = kz * kc, ke = min(Kp, kb + kc);
  const int ntk = ke > kb ? (ke - kb) / TR_MK : 0, nt = (b1 > b0 ? b1 - b0 : 0) * ntk;
  float c[4][TR_HNF][4];
  int i, j, r, s, t;
#pragma unroll
  for (i = 0; i < 4; i++)
#pragma unroll
    for (j = 0; j < TR_HNF; j++)
#pragma unroll
      for (r = 0; r < 4; r++) c[i][j][r] = 0.0f;
  for (t = 0; t < TR_HS - 1; t++) tr_hmma_fetch(As0, Bs0, A, lda, sA, B, ldb, sB, t, nt, ntk, b0, kb, m0, mp, n0, np, K, tid, TA, TB); /* the first tiles in flight */
  for (t = 0; t < nt; t++) {
    __local const uint *As = As0 + (t % TR_HS) * (TR_HM * TR_MK / 2), *Bs = Bs0 + (t % TR_HS) * (TR_HN * TR_MK / 2);
    const int u = t + TR_HS - 1;
    TR_HWAIT();
#if TR_GEMM_MMA == 1
    if (wg) __asm__ volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* (wgmma reads through the async proxy) */
#endif
    barrier(CLK_LOCAL_MEM_FENCE); /* tile t is in; every warp is done with tile t - 1 (wg: but for its wgmma), whose stage u reuses */
    if (!wg) tr_hmma_fetch(As0, Bs0, A, lda, sA, B, ldb, sB, u, nt, ntk, b0, kb, m0, mp, n0, np, K, tid, TA, TB);
#if TR_GEMM_MMA == 1
    if (wg) {
      /* the warpgroup's 64 rows of A (64 of a K-major tile's 64-byte rows, or a depth-major tile's plane), all of B;
         depths 16.. of a tile are 32 bytes on in the K-major atom, 16 rows of 128 bytes on MN-major */
      const uint sa = (uint)(ulong)As + (tid >> 7) * TR_WG_PLANE, sb = (uint)(ulong)Bs, ksa = TA ? 2048 : 32, ksb = TB ? 2048 : 32;
      TR_WG_FENCE();
#define TR_WG_TILE(TY, TRA, TRB)                                                              \
  do {                                                                                        \
    TR_WG_MMA(TY, TRA, TRB, c, tr_wg_desc(sa, TA), tr_wg_desc(sb, TB));                       \
    TR_WG_MMA(TY, TRA, TRB, c, tr_wg_desc(sa + ksa, TA), tr_wg_desc(sb + ksb, TB));             \
  } while (0)
#define TR_WG_TILES(TY)                                \
  do {                                                 \
    if (TA && TB) TR_WG_TILE(TY, "1", "1");            \
    else if (TA) TR_WG_TILE(TY, "1", "0");             \
    else if (TB) TR_WG_TILE(TY, "0", "1");             \
    else TR_WG_TILE(TY, "0", "0");                     \
  } while (0)
      if (F16) TR_WG_TILES("f16");
      else TR_WG_TILES("bf16");
#undef TR_WG_TILES
#undef TR_WG_TILE
      TR_WG_COMMIT();
      TR_WG_WAIT(1); /* tile t - 1's are done (tile t's runs on): after the barrier below its stage is copied over */
    } else {
#pragma unroll
      for (s = 0; s < TR_MK / 16; s++) {
        uint a[4][4], b[TR_HNF][2];
        /* lane l gives row l % 8 of matrix l / 8; a: (rows 0-7 | 8-15) x (depths 0-7 | 8-15), b: depths 0-7 | 8-15 of
           columns j, then j + 1: thread t receives row t / 4, word t % 4 of each, the fragments' layout (from a
           depth-major tile, depth l % 8 of the matrix, transposed as it loads). (Loading both depth steps' fragments
           before the products measured 1-3% slower on an H200.) */
#pragma unroll
        for (i = 0; i < 4; i++) {
          const int am = wm + i * 16 + (lm & 1) * 8, ak = 16 * s + (lm >> 1) * 8;
          if (TA) TR_LDM4T(a[i][0], a[i][1], a[i][2], a[i][3], As + TR_HTW(ak + lr, am >> 3));
          else TR_LDM4(a[i][0], a[i][1], a[i][2], a[i][3], As + TR_HSW(am + lr, ak >> 3));
        }
#pragma unroll
        for (j = 0; j < TR_HNF; j += 2) {
          const int bn = wn + (j + (lm >> 1)) * 8, bk = 16 * s + (lm & 1) * 8;
          if (TB) TR_LDM4T(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], Bs + TR_HTW(bk + lr, bn >> 3));
          else TR_LDM4(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], Bs + TR_HSW(bn + lr, bk >> 3));
        }
#pragma unroll
        for (i = 0; i < 4; i++)
#pragma unroll
          for (j = 0; j < TR_HNF; j++) {
            if (F16) __asm__ volatile(TR_MMA_F16 TR_MMA_OPS TR_MMA_ARGS(c[i][j], a[i], b[j]));
            else __asm__ volatile(TR_MMA_BF16 TR_MMA_OPS TR_MMA_ARGS(c[i][j], a[i], b[j]));
          }
      }
    }
#else /* the fragment's outputs: rows g (r < 2) or g + 8, columns 2q + (r & 1) (wgmma's accumulator too, with wg) */
    for (s = 0; s < TR_MK / 16; s++)
      for (i = 0; i < 4; i++)
        for (j = 0; j < TR_HNF; j++)
          for (r = 0; r < 4; r++) {
            const int am = mw + i * rs + g + (r >> 1) * 8, bn = nw + i * cs + j * 8 + 2 * q + (r & 1);
            int kk;
            for (kk = 0; kk < 16; kk++)
              c[i][j][r] = fma(tr_hmma_at(As, am, 16 * s + kk, F16, TA), tr_hmma_at(Bs, bn, 16 * s + kk, F16, TB), c[i][j][r]);
          }
#endif
    if (wg) {
      barrier(CLK_LOCAL_MEM_FENCE); /* every warpgroup is done with tile t - 1 */
      tr_hmma_fetch(As0, Bs0, A, lda, sA, B, ldb, sB, u, nt, ntk, b0, kb, m0, mp, n0, np, K, tid, TA, TB);
    }
  }
#if TR_GEMM_MMA == 1
  if (wg) TR_WG_WAIT0_ACC(c);
#endif
  if (act) tr_mma_store_swiglu(C, ldc, act, ld_act, M, N, swr, keep, c8 & 1, c8 >> 1, a16, ld16, kpa, m0 + mw, n0 + nw, rs, cs, g, q, F16, c);
  else tr_mma_store(C, ldc, M, N, m0 + mw, n0 + nw, rs, cs, g, q, acc, c8, rnd & 3, rnd >> 2, F16, c);
}
/* tr_k_hmma_<bf16|f16>[_ta|_tb|_tab]: C (+)= op(A) op(B)^T of packed operands (tr_k_pack16; lda, ldb, sA, sB in words;
 _ta / _tb: that operand depth-major); the grid and the rest of the arguments as the SGEMM kernels'; wc: C rounded
 to bfloat16 (1) / float16 (2) after the product (and the accumulation), as tr_k_round would; plus 4: C stored as
 those 16-bit values (tr_mma_store's c16; ldc and sC count them, the offset two a float) */
#define TR_HMMA_K(NAME, F16, TA, TB)                                                                                       \
  __kernel __attribute__((reqd_work_group_size(TR_HNT, 1, 1))) void NAME(__global const uint *A, ulong A_off, long lda,   \
    long sA, __global const uint *B, ulong B_off, long ldb, long sB, __global float *C, ulong C_off, long ldc, long sC,    \
    int M, int N, int K, int Kp, int acc, int nb, int bpg, int ks, int kc, int z0, int wc) {                             \
    __local uint4 As[TR_HS * TR_HM * TR_MK / 8] TR_WG_AL, Bs[TR_HS * TR_HN * TR_MK / 8] TR_WG_AL;                                 \
    const int z = z0 + get_group_id(2);                                                                                  \
    const ulong co = ((wc & 4) ? 2 * C_off : C_off) + (ulong)z * (ulong)sC;                                              \
    __global float *Cz = (wc & 4) ? (__global float *)((__global ushort *)C + co) : C + co;                             \
    tr_hmma(A + A_off, lda, sA, B + B_off, ldb, sB, Cz, ldc, M, N, K, Kp, acc, nb, bpg, ks, kc, z,                      \
            ((co | (ulong)ldc) & 1) == 0, (__local uint *)As, (__local uint *)Bs, F16, wc, 0, 0, 0, 0, 0, 0, 0, TA, TB);  \
  }
/* the same with the SwiGLU's epilogue (tr_mma_store_swiglu): batch z = the third group index (no K pieces, no sum), C's
 gate and up halves in columns (swr 0: N / 2 each, B's rows interleaved, act written packed into a16, kpa 16-bit
 values a row) or rows (swr 1, A's; with kpa > 0 act packed into a16, batch z's s16 words further); _tb: B
 depth-major. Every output is rounded to the kernel's precision. */
#define TR_HMMA_SWIGLU_K(NAME, F16, TB)                                                                                    \
  __kernel __attribute__((reqd_work_group_size(TR_HNT, 1, 1))) void NAME(__global const uint *A, ulong A_off, long lda,   \
    long sA, __global const uint *B, ulong B_off, long ldb, long sB, __global float *C, ulong C_off, long ldc, long sC,    \
    int M, int N, int K, int Kp, int nb, __global float *act, ulong act_off, long ld_act, long s_act, int swr,             \
    int keep,                                                                                                            \
    __global uint *a16, ulong a16_off, long ld16, long s16, int kpa) {                                                   \
    __local uint4 As[TR_HS * TR_HM * TR_MK / 8] TR_WG_AL, Bs[TR_HS * TR_HN * TR_MK / 8] TR_WG_AL;                                 \
    const int z = get_group_id(2);                                                                                       \
    const ulong co = C_off + (ulong)z * (ulong)sC, ao = act_off + (ulong)z * (ulong)s_act;                               \
    const long up = swr ? (long)(M / 2) * ldc : N / 2;                                                                   \
    tr_hmma(A + A_off, lda, sA, B + B_off, ldb, sB, C + co, ldc, M, N, K, Kp, 0, nb, 1, 1, Kp, z,                        \
            (((ao | (ulong)ld_act) & 1) == 0) | ((((co | (ulong)ldc | (ulong)up) & 1) == 0) << 1), (__local uint *)As,      \
            (__local uint *)Bs, F16, F16 ? 2 : 1, act + ao, ld_act, swr, keep, a16 + a16_off + z * s16, ld16, kpa, 0, TB); \
  }
TR_HMMA_K(tr_k_hmma_bf16, 0, 0, 0)
TR_HMMA_K(tr_k_hmma_bf16_ta, 0, 1, 0)
TR_HMMA_K(tr_k_hmma_bf16_tb, 0, 0, 1)
TR_HMMA_K(tr_k_hmma_bf16_tab, 0, 1, 1)
TR_HMMA_K(tr_k_hmma_f16, 1, 0, 0)
TR_HMMA_K(tr_k_hmma_f16_ta, 1, 1, 0)
TR_HMMA_K(tr_k_hmma_f16_tb, 1, 0, 1)
TR_HMMA_K(tr_k_hmma_f16_tab, 1, 1, 1)
TR_HMMA_SWIGLU_K(tr_k_hmma_swiglu_bf16, 0, 0)
TR_HMMA_SWIGLU_K(tr_k_hmma_swiglu_bf16_tb, 0, 1)
TR_HMMA_SWIGLU_K(tr_k_hmma_swiglu_f16, 1, 0)
TR_HMMA_SWIGLU_K(tr_k_hmma_swiglu_f16_tb, 1, 1)
/* The packing kernels read their source as floats, or (the _h kernels) as the 16-bit values of the precision fdt that
 a 16-bit tape holds (tr_k_half's): then every offset and stride counts values, the buffer's offset (in floats) two each. */
#define TR_LDF(P, i) (P)[i]
#define TR_LDH(P, i) tr_unhalf1((P)[i], fdt)
#define TR_LDF4(P, i) (*(__global const float4 *)((P) + (i)))
#define TR_LDH4(P, i) tr_unhalf4(*(__global const ushort4 *)((P) + (i)), fdt)
/* Element at P[o] of an operand packed by tr_k_pack16: itself, or with so (a SwiGLU's gate_up operand, the up
 value so further) silu(gate) * up as tr_k_swiglu_fwd computes it, in the precision fdt. */
#define TR_PACK_AT(LD, P, o) (so ? tr_swiglu1(LD(P, o), LD(P, (o) + so), fdt) : LD(P, o))
/* D = op(P) rounded to bfloat16 (fdt 1) / float16 (2), packed for tr_k_hmma (either way: a depth-major operand is
 packed as stored too): batch b's rows x < rp of kp / 2 words (pairs of columns), zeros past rows x K; op(P)[x][k] =
 P[x ld + k] (TR_PACK_AT: with so, the SwiGLU of P's gate_up).
 Four depths per work-item (a float4 where the rows are 16-byte aligned). Offsets and strides in floats (P) and words
 (D). il > 0 (rows = 2 il: the SwiGLU's gate and up halves, tr_mma_store_swiglu): blocks of 8 rows of each half
 alternate, row x taken from gate (or up) row (x / 16) * 8 + x % 8; rows past a half's il are zeros. */
#define TR_PACK16_K(name, T, VALS, LD, LD4)                                                                                   \
static inline void name##_of(__global const T *P, ulong P_off, long ld, long sP, int rows, int K, __global uint *D, ulong D_off, \
                             int kp, int rp, const int fdt, long so, int il) {                                                \
  const int k = 4 * get_global_id(0), x = get_global_id(1), hx = (x >> 4) * 8 + (x & 7), src = il ? ((x >> 3) & 1) * il + hx : x; \
  const long b = get_global_id(2);                                                                                            \
  const ulong o = VALS * P_off + b * sP + (long)src * ld;                                                                     \
  float4 v = (float4)(0.0f);                                                                                                  \
  if (x >= rp || k >= kp) return;                                                                                             \
  if (il ? hx < il : x < rows) {                                                                                              \
    if (((o | (ulong)so) & 3) == 0 && k + 3 < K) {                                                                            \
      v = LD4(P, o + k);                                                                                                      \
      if (so) {                                                                                                               \
        const float4 u = LD4(P, o + k + so);                                                                                  \
        v = (float4)(tr_swiglu1(v.s0, u.s0, fdt), tr_swiglu1(v.s1, u.s1, fdt), tr_swiglu1(v.s2, u.s2, fdt), tr_swiglu1(v.s3, u.s3, fdt)); \
      }                                                                                                                       \
    } else                                                                                                                    \
      v = (float4)(k < K ? TR_PACK_AT(LD, P, o + k) : 0.0f, k + 1 < K ? TR_PACK_AT(LD, P, o + k + 1) : 0.0f,                  \
                   k + 2 < K ? TR_PACK_AT(LD, P, o + k + 2) : 0.0f, k + 3 < K ? TR_PACK_AT(LD, P, o + k + 3) : 0.0f);          \
  }                                                                                                                           \
  *(__global uint2 *)(D + D_off + (b * rp + x) * (long)(kp / 2) + k / 2) = (uint2)(tr_mma_pack(v.s0, v.s1, fdt == 2), tr_mma_pack(v.s2, v.s3, fdt == 2)); \
}                                                                                                                             \
__kernel void name(__global const T *P, ulong P_off, long ld, long sP, int rows, int K, __global uint *D, ulong D_off, int kp, \
                   int rp, int fdt, long so, int il) {                                                                        \
  if (fdt == 2) name##_of(P, P_off, ld, sP, rows, K, D, D_off, kp, rp, 2, so, il);                                            \
  else name##_of(P, P_off, ld, sP, rows, K, D, D_off, kp, rp, 1, so, il);                                                     \
}
TR_PACK16_K(tr_k_pack16, float, 1, TR_LDF, TR_LDF4)
TR_PACK16_K(tr_k_pack16_h, ushort, 2, TR_LDH, TR_LDH4)
/* The SwiGLU backward (tr_k_swiglu_bwd's values, rounded to fdt) written only as the 16-bit packing of dg that
 tr_k_hmma reads: row r's dgate and dup (2 width values, stored as rpr = 2 width / cols rows of cols) go to packed
 batch r / rb, its rows (r % rb) rpr.., kp / 2 words a row, rp rows a batch. The padding rows are left as they are
 (tr_k_hmma reads no depth past K, and an operand's rows past its own give outputs it does not store). Four values
 of each half per work-item (width, cols and kp multiples of 4). g as floats, or (_h) as 16-bit values (as above); da
 likewise (_d: 16 bits). */
#define TR_PACK16_SWB_K(name, T, VALS, LD4, TD, DVALS, LDD4)                                                                  \
static inline void name##_of(long rows, long width, __global const T *g, ulong g_off, ulong gs, __global const TD *da, ulong da_off, \
                             ulong das, __global uint *D, ulong D_off, int cols, int rb, int rp, int kp, const int fdt) {     \
  const long j = 4 * get_global_id(0), r = get_global_id(1), rpr = 2 * width / cols, up = width + j;                          \
  float4 x, u, d;                                                                                                             \
  float2 v0, v1, v2, v3;                                                                                                      \
  if (j >= width || r >= rows) return;                                                                                        \
  g += VALS * g_off + r * gs, da += DVALS * da_off + r * das;                                                                 \
  x = LD4(g, j), u = LD4(g, j + width), d = LDD4(da, j);                                                                      \
  v0 = tr_swiglu_bwd1(x.s0, u.s0, d.s0), v1 = tr_swiglu_bwd1(x.s1, u.s1, d.s1);                                              \
  v2 = tr_swiglu_bwd1(x.s2, u.s2, d.s2), v3 = tr_swiglu_bwd1(x.s3, u.s3, d.s3);                                              \
  D += D_off + ((r / rb) * (long)rp + (r % rb) * rpr) * (kp / 2);                                                             \
  /* (tr_mma_pack rounds, as tr_round1 would) */                                                                              \
  *(__global uint2 *)(D + (j / cols) * (kp / 2) + (j % cols) / 2) = (uint2)(tr_mma_pack(v0.s0, v1.s0, fdt == 2), tr_mma_pack(v2.s0, v3.s0, fdt == 2)); \
  *(__global uint2 *)(D + (up / cols) * (kp / 2) + (up % cols) / 2) = (uint2)(tr_mma_pack(v0.s1, v1.s1, fdt == 2), tr_mma_pack(v2.s1, v3.s1, fdt == 2)); \
}                                                                                                                             \
__kernel void name(long rows, long width, __global const T *g, ulong g_off, ulong gs, __global const TD *da, ulong da_off,    \
                   ulong das, __global uint *D, ulong D_off, int cols, int rb, int rp, int kp, int fdt) {                     \
  if (fdt == 2) name##_of(rows, width, g, g_off, gs, da, da_off, das, D, D_off, cols, rb, rp, kp, 2);                         \
  else name##_of(rows, width, g, g_off, gs, da, da_off, das, D, D_off, cols, rb, rp, kp, 1);                                  \
}
#define TR_LDF4U(P, i) vload4(0, (P) + (i))
#define TR_LDH4U(P, i) tr_unhalf4(vload4(0, (P) + (i)), fdt)
TR_PACK16_SWB_K(tr_k_pack16_swiglu_bwd, float, 1, TR_LDF4U, float, 1, TR_LDF4U)
TR_PACK16_SWB_K(tr_k_pack16_swiglu_bwd_h, ushort, 2, TR_LDH4U, float, 1, TR_LDF4U)
TR_PACK16_SWB_K(tr_k_pack16_swiglu_bwd_d, float, 1, TR_LDF4U, ushort, 2, TR_LDH4U)
TR_PACK16_SWB_K(tr_k_pack16_swiglu_bwd_hd, ushort, 2, TR_LDH4U, ushort, 2, TR_LDH4U)
#endif
#ifndef TR_MMA_ONLY
/* C (=|+=) sum_z P[z] in z order (P: nz partials of M x N, packed). Deterministic split-K / batch sum. */
__kernel void tr_k_gemm_reduce(__global const float *P, ulong P_off, int nz, int M, int N,
               __global float *C, ulong C_off, long ldc, int acc) {
  const int n = get_global_id(0), m = get_global_id(1);
  const long mn = (long)M * N, idx = (long)m * N + n;
  float s;
  int z;
  if (n >= N || m >= M) return;
  P += P_off;
  C += C_off + (long)m * ldc + n;
  s = acc ? *C : 0.0f;
  for (z = 0; z < nz; z++) s += P[z * mn + idx];
  *C = s;
}
/* Y = X^T (X: R x C rows of ldx, Y: C x R rows of ldy), 32 x 32 tiles through local memory; work-group 32 x 8. */
__kernel __attribute__((reqd_work_group_size(32, 8, 1))) void tr_k_transpose(__global const float *X, ulong X_off, long ldx,
               int R, int C, __global float *Y, ulong Y_off, long ldy) {
  __local float t[32][33];
  const int c0 = get_group_id(0) * 32, r0 = get_group_id(1) * 32, lx = get_local_id(0), ly = get_local_id(1);
  int i;
  X += X_off, Y += Y_off;
  for (i = ly; i < 32; i += 8)
    if (r0 + i < R && c0 + lx < C) t[i][lx] = X[(long)(r0 + i) * ldx + c0 + lx];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (i = ly; i < 32; i += 8)
    if (c0 + i < C && r0 + lx < R) Y[(long)(c0 + i) * ldy + r0 + lx] = t[lx][i];
}
#endif /* TR_MMA_ONLY */
