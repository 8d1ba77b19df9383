/* The CPU backend's gemm: C = alpha * op(A) * op(B) + beta * C, row-major.
 *
 * Two implementations, chosen per backend by DPT_CPU_GEMM:
 *   openblas  cblas_sgemm (only when built with DPT_HAVE_OPENBLAS; the default then);
 *   portable  the cache-blocked kernel below, always built (the default otherwise, and what a
 *             backend gets when OpenBLAS cannot serve one more: cpu_openblas.c).
 *
 * The portable kernel follows the Goto/BLIS loop nest. op(A) and op(B) are copied ("packed")
 * block by block into contiguous, zero-padded micro-panels so that the innermost kernel reads
 * both operands with unit stride whatever the transposes and leading dimensions were:
 *
 *   for jc in [0,n) step NC                         B block: KC x NC, packed once per (jc,pc)
 *     for pc in [0,k) step KC                         into NR-wide micro-panels (L3 / L2)
 *       pack op(B)[pc:pc+KC, jc:jc+NC]
 *       for ic in [0,m) step MC                     A block: MC x KC, MR-tall micro-panels (L2)
 *         pack op(A)[ic:ic+MC, pc:pc+KC]
 *         for jr in [0,NC) step NR                  one B micro-panel (KC x NR) stays in L1
 *           for ir in [0,MC) step MR
 *             C[ir:ir+MR, jr:jr+NR] (+)= alpha * Apanel * Bpanel   (MR x NR micro-kernel)
 *
 * The micro-kernel keeps its MR x NR accumulators in registers for the whole KC loop: per
 * step it loads NR/VW vectors of B, broadcasts MR scalars of A and issues MR*NR/VW
 * multiply-adds, so arithmetic intensity is MR*NR/(MR+NR) flops per loaded float. Packing
 * costs O(mk + kn) per block against O(mnk) flops. beta is applied only with the first K
 * block (later blocks accumulate with beta = 1); with beta == 0 C is written without being
 * read, so NaN in C does not propagate.
 *
 * The micro-kernels are written with GCC/Clang vector extensions rather than left to the
 * auto-vectorizer, so the accumulators stay in registers under any -O level >= 1; from plain
 * nested loops GCC vectorizes the wrong loop of the tile and spills and shuffles them. Kernels,
 * picked once at run time:
 *   baseline  MR=6, NR=8,  4-wide vectors: 12 accumulator registers of the 16 in SSE2;
 *   avx2+fma  MR=6, NR=16, 8-wide vectors: 12 of 16 ymm registers; compiled with a target
 *             attribute and used only where __builtin_cpu_supports reports AVX2 and FMA.
 * cpu.cmake compiles this file with -ffp-contract=fast so that acc += a * b becomes an FMA
 * in the avx2 kernel (results then differ from the baseline kernel in the last bits).
 */
#include "backends/cpu/cpu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"
#include "base/env.h"

#ifdef DPT_HAVE_OPENBLAS
#include <cblas.h>
#include <limits.h>
#endif

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define DPT_GEMM_X86 1
#else
#define DPT_GEMM_X86 0
#endif

/* Cache blocking. KC x NR floats of B (16 KiB for NR = 16) stay in L1 during a micro-panel
 * sweep; MC x KC of A (144 KiB) in L2; KC x NC of B (2 MiB) in L2/L3. MC is rounded down to a
 * multiple of the kernel's MR at run time. */
enum { DPT_GEMM_KC = 256, DPT_GEMM_MC = 144, DPT_GEMM_NC = 2048 };

/* The micro-kernel: C[0:mr, 0:nr] = alpha * sum_p pa[p][0:MR] (x) pb[p][0:NR] + beta * C,
 * mr <= MR, nr <= NR (edge tiles), C not read when beta == 0.
 * pa: packed A micro-panel, kc x MR floats; pb: packed B micro-panel, kc x NR floats;
 * c: the tile's top-left element in C, rows ldc floats apart. */
typedef void (*dpt_gemm_ukernel_fn)(size_t kc, const float *restrict pa, const float *restrict pb,
                                    float *restrict c, size_t ldc, size_t mr, size_t nr,
                                    float alpha, float beta);

typedef struct dpt_gemm_ukernel {
  const char *isa; /* for the driver string */
  size_t mr, nr;
  dpt_gemm_ukernel_fn fn;
} dpt_gemm_ukernel;

typedef float dpt_f32x4 __attribute__((vector_size(16)));
typedef float dpt_f32x8 __attribute__((vector_size(32)));

/* Defines one micro-kernel `fname` with MR rows and NV vectors of type vec_t (VW floats each)
 * per row, NR = NV * VW. `attr` is its target attribute (empty for the baseline). Vectors are
 * moved with memcpy: packed panels are aligned but C tiles are not. */
#define DPT_DEFINE_UKERNEL(fname, attr, vec_t, VW, MR, NV)                                         \
  attr static void fname(size_t kc, const float *restrict pa, const float *restrict pb,            \
                         float *restrict c, size_t ldc, size_t mr, size_t nr, float alpha,         \
                         float beta) {                                                             \
    vec_t acc[MR][NV];                                                                             \
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) {                                        \
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) acc[i][v] = (vec_t){0};                 \
    }                                                                                              \
    for (size_t p = 0; p < kc; ++p) {                                                              \
      vec_t bv[NV];                                                                                \
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {                                       \
        memcpy(&bv[v], pb + p * (NV * VW) + v * VW, sizeof(vec_t));                                \
      }                                                                                            \
      _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) {                                      \
        const float ai = pa[p * MR + i];                                                           \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];              \
      }                                                                                            \
    }                                                                                              \
    if (mr == MR && nr == NV * VW) {                                                               \
      _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) {                                      \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {                                     \
          float *cp = c + (size_t)i * ldc + (size_t)v * VW;                                        \
          vec_t cv = alpha * acc[i][v];                                                            \
          if (beta != 0.0f) {                                                                      \
            vec_t old;                                                                             \
            memcpy(&old, cp, sizeof old);                                                          \
            cv += beta * old;                                                                      \
          }                                                                                        \
          memcpy(cp, &cv, sizeof cv);                                                              \
        }                                                                                          \
      }                                                                                            \
    } else {                                                                                       \
      float tile[MR][NV * VW];                                                                     \
      memcpy(tile, acc, sizeof tile);                                                              \
      for (size_t i = 0; i < mr; ++i) {                                                            \
        float *ci = c + i * ldc;                                                                   \
        if (beta == 0.0f) {                                                                        \
          for (size_t j = 0; j < nr; ++j)                                                          \
            ci[j] = alpha * tile[i][j];                                                            \
        } else {                                                                                   \
          for (size_t j = 0; j < nr; ++j)                                                          \
            ci[j] = alpha * tile[i][j] + beta * ci[j];                                             \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }

DPT_DEFINE_UKERNEL(dpt_gemm_ukernel_baseline, , dpt_f32x4, 4, 6, 2)
static const dpt_gemm_ukernel dpt_gemm_baseline = {"baseline", 6, 8, dpt_gemm_ukernel_baseline};

#if DPT_GEMM_X86
DPT_DEFINE_UKERNEL(dpt_gemm_ukernel_avx2, __attribute__((target("avx2,fma"))), dpt_f32x8, 8, 6, 2)
static const dpt_gemm_ukernel dpt_gemm_avx2 = {"avx2+fma", 6, 16, dpt_gemm_ukernel_avx2};
#endif

/* The fastest kernel this CPU runs, or the baseline one when `baseline_only`. */
static const dpt_gemm_ukernel *dpt_gemm_pick_ukernel(int baseline_only) {
  if (baseline_only) return &dpt_gemm_baseline;
#if DPT_GEMM_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &dpt_gemm_avx2;
#endif
  return &dpt_gemm_baseline;
}

/* ---- implementation choice ----------------------------------------------------------------- */

dpt_status dpt_cpu_gemm_select(dpt_cpu_gemm_impl *out, int *requested) {
  const char *env = dpt_env_get("DPT_CPU_GEMM");
  if (requested) *requested = env != NULL && env[0] != '\0';
  if (env == NULL || env[0] == '\0') {
#ifdef DPT_HAVE_OPENBLAS
    *out = DPT_CPU_GEMM_OPENBLAS;
#else
    *out = DPT_CPU_GEMM_PORTABLE;
#endif
    return DPT_OK;
  }
  if (strcmp(env, "portable") == 0) {
    *out = DPT_CPU_GEMM_PORTABLE;
    return DPT_OK;
  }
  if (strcmp(env, "portable-baseline") == 0) {
    *out = DPT_CPU_GEMM_PORTABLE_BASELINE;
    return DPT_OK;
  }
  if (strcmp(env, "openblas") == 0) {
#ifdef DPT_HAVE_OPENBLAS
    *out = DPT_CPU_GEMM_OPENBLAS;
    return DPT_OK;
#else
    return dpt_set_error(DPT_ERR_UNSUPPORTED,
                         "DPT_CPU_GEMM=openblas but this library was built without OpenBLAS "
                         "(use DPT_CPU_GEMM=portable)");
#endif
  }
  return dpt_set_error(DPT_ERR_INVALID_ARG,
                       "DPT_CPU_GEMM='%s' is not one of: portable, portable-baseline, openblas",
                       env);
}

void dpt_cpu_gemm_describe(dpt_cpu_gemm_impl impl, char *text, size_t len) {
#ifdef DPT_HAVE_OPENBLAS
  if (impl == DPT_CPU_GEMM_OPENBLAS) {
    /* The loaded library's own version ("OpenBLAS 0.3.21 DYNAMIC_ARCH ..."), which may differ
     * from the headers this was compiled against. */
    char version[32] = "";
    const char *config = openblas_get_config();
    if (config == NULL || sscanf(config, "OpenBLAS %31s", version) != 1) {
      snprintf(version, sizeof version, "%s", "(unknown version)");
    }
    snprintf(text, len, "openblas %s", version);
    return;
  }
#endif
  snprintf(text, len, "portable gemm, %s",
           dpt_gemm_pick_ukernel(impl == DPT_CPU_GEMM_PORTABLE_BASELINE)->isa);
}

/* ---- packing ------------------------------------------------------------------------------- */

/* Packs a len x kc block of one operand into ceil(len/W) micro-panels of kc x W floats each,
 * panel rows past len zero-filled: dst[panel][p*W + i] = element (panel*W + i, p). The block
 * starts at src; element (i, p) is src[i*ld + p] when `k_contiguous`, else src[p*ld + i].
 * For A the panel index is the row of op(A) (k_contiguous = !trans_a), for B the column of
 * op(B) (k_contiguous = trans_b), so one routine packs both. */
static void dpt_gemm_pack(size_t len, size_t kc, const float *src, size_t ld, int k_contiguous,
                          size_t W, float *restrict dst) {
  for (size_t i0 = 0; i0 < len; i0 += W) {
    const size_t width = len - i0 < W ? len - i0 : W;
    if (k_contiguous) {
      /* Read each source row once and scatter it down the panel. */
      for (size_t i = 0; i < width; ++i) {
        const float *row = src + (i0 + i) * ld;
        for (size_t p = 0; p < kc; ++p)
          dst[p * W + i] = row[p];
      }
    } else {
      /* Each panel row is contiguous in the source. */
      for (size_t p = 0; p < kc; ++p) {
        const float *row = src + p * ld + i0;
        for (size_t i = 0; i < width; ++i)
          dst[p * W + i] = row[i];
      }
    }
    for (size_t p = 0; p < kc; ++p) {
      for (size_t i = width; i < W; ++i)
        dst[p * W + i] = 0.0f;
    }
    dst += kc * W;
  }
}

/* Makes *buf hold at least `need` floats (64-byte aligned); keeps the old buffer on failure. */
static dpt_status dpt_gemm_reserve(float **buf, size_t *cap, size_t need) {
  if (need <= *cap) return DPT_OK;
  size_t bytes = 0;
  /* need is bounded by the block sizes, so this cannot overflow in practice; check anyway. */
  if (!dpt_mul_ok(need, sizeof(float), &bytes) || !dpt_add_ok(bytes, 63, &bytes)) {
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "cpu gemm: packing buffer of %zu floats too large",
                         need);
  }
  bytes &= ~(size_t)63;
  float *p = aligned_alloc(64, bytes);
  if (p == NULL) {
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY,
                         "cpu gemm: cannot allocate a packing buffer of %zu bytes", bytes);
  }
  free(*buf);
  *buf = p;
  *cap = need;
  return DPT_OK;
}

void dpt_cpu_gemm_ws_free(dpt_cpu_gemm_ws *ws) {
  free(ws->pack_a);
  free(ws->pack_b);
  ws->pack_a = ws->pack_b = NULL;
  ws->pack_a_n = ws->pack_b_n = 0;
}

static size_t dpt_min_size(size_t x, size_t y) {
  return x < y ? x : y;
}

static size_t dpt_round_up(size_t x, size_t to) {
  return (x + to - 1) / to * to;
}

static dpt_status dpt_gemm_portable(dpt_cpu_gemm_ws *ws, const dpt_gemm_ukernel *uk, int trans_a,
                                    int trans_b, size_t m, size_t n, size_t k, float alpha,
                                    const float *a, size_t lda, const float *b, size_t ldb,
                                    float beta, float *c, size_t ldc) {
  const size_t MR = uk->mr, NR = uk->nr;
  const size_t mc_max = DPT_GEMM_MC / MR * MR;
  const size_t kc_max = dpt_min_size(k, DPT_GEMM_KC);
  const size_t nc_max = dpt_min_size(n, DPT_GEMM_NC);
  dpt_status st = dpt_gemm_reserve(&ws->pack_a, &ws->pack_a_n,
                                   dpt_round_up(dpt_min_size(m, mc_max), MR) * kc_max);
  if (st != DPT_OK) return st;
  st = dpt_gemm_reserve(&ws->pack_b, &ws->pack_b_n, dpt_round_up(nc_max, NR) * kc_max);
  if (st != DPT_OK) return st;

  for (size_t jc = 0; jc < n; jc += nc_max) {
    const size_t nc = dpt_min_size(nc_max, n - jc);
    for (size_t pc = 0; pc < k; pc += kc_max) {
      const size_t kc = dpt_min_size(kc_max, k - pc);
      const float beta_blk = pc == 0 ? beta : 1.0f;
      const float *b_blk = trans_b ? b + jc * ldb + pc : b + pc * ldb + jc;
      dpt_gemm_pack(nc, kc, b_blk, ldb, trans_b, NR, ws->pack_b);
      for (size_t ic = 0; ic < m; ic += mc_max) {
        const size_t mc = dpt_min_size(mc_max, m - ic);
        const float *a_blk = trans_a ? a + pc * lda + ic : a + ic * lda + pc;
        dpt_gemm_pack(mc, kc, a_blk, lda, !trans_a, MR, ws->pack_a);
        for (size_t jr = 0; jr < nc; jr += NR) {
          const size_t nr = dpt_min_size(NR, nc - jr);
          for (size_t ir = 0; ir < mc; ir += MR) {
            const size_t mr = dpt_min_size(MR, mc - ir);
            uk->fn(kc, ws->pack_a + ir * kc, ws->pack_b + jr * kc, c + (ic + ir) * ldc + jc + jr,
                   ldc, mr, nr, alpha, beta_blk);
          }
        }
      }
    }
  }
  return DPT_OK;
}

#ifdef DPT_HAVE_OPENBLAS
static int dpt_fits_blasint(size_t x) {
  return x <= (sizeof(blasint) >= sizeof(long long) ? (size_t)LLONG_MAX : (size_t)INT_MAX);
}
#endif

dpt_status dpt_cpu_sgemm(dpt_cpu_gemm_ws *ws, dpt_cpu_gemm_impl impl, int trans_a, int trans_b,
                         size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
                         const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  if (m == 0 || n == 0) return DPT_OK;
  if (k == 0 || alpha == 0.0f) {
    /* BLAS semantics: the product term vanishes and A, B are not read. */
    for (size_t i = 0; i < m; ++i) {
      float *ci = c + i * ldc;
      if (beta == 0.0f) {
        for (size_t j = 0; j < n; ++j)
          ci[j] = 0.0f;
      } else {
        for (size_t j = 0; j < n; ++j)
          ci[j] *= beta;
      }
    }
    return DPT_OK;
  }
#ifdef DPT_HAVE_OPENBLAS
  /* Sizes past the BLAS integer range fall through to the portable kernel. */
  if (impl == DPT_CPU_GEMM_OPENBLAS && dpt_fits_blasint(m) && dpt_fits_blasint(n) &&
      dpt_fits_blasint(k) && dpt_fits_blasint(lda) && dpt_fits_blasint(ldb) &&
      dpt_fits_blasint(ldc)) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
    return DPT_OK;
  }
#endif
  return dpt_gemm_portable(ws, dpt_gemm_pick_ukernel(impl == DPT_CPU_GEMM_PORTABLE_BASELINE),
                           trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

dpt_status dpt_cpu_gemm(dpt_backend *be, const dpt_gemm_args *a) {
  dpt_cpu_ctx *ctx = be->ctx;
  dpt_status st = dpt_cpu_sgemm(&ctx->ws, ctx->gemm, a->trans_a, a->trans_b, a->m, a->n, a->k,
                                a->alpha, dpt_cpu_f32(a->a), a->lda, dpt_cpu_f32(a->b), a->ldb,
                                a->beta, dpt_cpu_f32(a->c), a->ldc);
  return st == DPT_OK ? DPT_OK : dpt_error_context(st, "gemm %zux%zux%zu", a->m, a->n, a->k);
}
