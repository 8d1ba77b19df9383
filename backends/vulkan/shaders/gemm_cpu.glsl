// gemm for CPU drivers (lavapipe): the contract of gemm.comp, tiled for SIMD-on-CPU execution.
// The body of gemm_cpu.comp (RH 2: 128 x 128 tiles) and gemm_cpu64.comp (RH 1: 64 x 128 tiles,
// only the first 8 of each invocation's 16 rows, for a C of few rows: conv gemms, m = 32..64);
// the includer defines RH and the #version and extensions.
//
// On a CPU driver an invocation is one lane of a SIMD register, and every load or store of
// shared or storage memory is a loop over the lanes: its cost depends on the number of such
// instructions, hardly on their width. So this variant maximises multiply-adds per memory
// instruction: each invocation of the 8 x 8 workgroup accumulates 16 x 16 outputs (a 128 x 128
// tile per workgroup; the accumulators live on the stack, which is cheap on a CPU), and shared
// memory holds the staged tiles as dvec4, 8 floats per load (needs shaderFloat64; the values
// are only bit-packed, never computed in double).
//
// Invocation (tx, ty) owns rows 8ty + {0..7} and 64 + 8ty + {0..7}, columns 8tx + {0..7} and
// 64 + 8tx + {0..7}. Per BK = 16 step: the workgroup stages the 128 x 16 slice of op(A) and the
// 16 x 128 slice of op(B), each unit 8 consecutive floats of a stored row (so global reads are
// contiguous whatever the transposition); then per 8 k every invocation reads 32 dvec4 and does
// 16 * 16 * 8 multiply-adds, accumulator by accumulator over k (the accumulator stays in a
// register for 8 multiply-adds).
// Specialization constants: TRANS_A, TRANS_B; VEC_A, VEC_B: 0 element loads, 1 vec4 loads,
// 2 dvec4 loads from global memory (offset, leading dimension and the contiguous extent are
// multiples of 4, respectively 8).
// Batched (dpt_gemm_batched): the matrices of item i start stride_x elements after those of
// item i - 1; workgroup layer gl_WorkGroupID.z computes C_z, summing nsum items in order (a
// plain gemm: one layer, nsum 1, strides 0).
layout(local_size_x = 8, local_size_y = 8) in;
#include "common.glsl"
layout(constant_id = 0) const uint TRANS_A = 0;
layout(constant_id = 1) const uint TRANS_B = 0;
layout(constant_id = 2) const uint VEC_A = 0;
layout(constant_id = 3) const uint VEC_B = 0;
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, set = 0, binding = 0) readonly buffer A8 { dvec4 a8[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(std430, set = 0, binding = 1) readonly buffer B8 { dvec4 b8[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint m, n, k, lda, ldb, ldc, a_off, b_off, c_off;
  float alpha, beta;
  uint tiles_n;
  uint stride_a, stride_b, stride_c, nsum;
} pc;

const uint BM = 64u * RH, BN = 128u, BK = 16u;
// !TRANS_A: As[i * 2 + h]  = op(A)[row0 + i][k0 + 8h .. +7]
//  TRANS_A: As[p * 16 + g] = op(A)[row0 + 8g .. +7][k0 + p]
// !TRANS_B: Bs[p * 16 + g] = op(B)[k0 + p][col0 + 8g .. +7]
//  TRANS_B: Bs[j * 2 + h]  = op(B)[k0 + 8h .. +7][col0 + j]
shared dvec4 As[256];
shared dvec4 Bs[256];

double pk2(float x, float y) {
  return packDouble2x32(uvec2(floatBitsToUint(x), floatBitsToUint(y)));
}

dvec4 pk8(vec4 lo, vec4 hi) {
  return dvec4(pk2(lo.x, lo.y), pk2(lo.z, lo.w), pk2(hi.x, hi.y), pk2(hi.z, hi.w));
}

void unpk8(dvec4 d, out vec4 lo, out vec4 hi) {
  lo = vec4(uintBitsToFloat(unpackDouble2x32(d.x)), uintBitsToFloat(unpackDouble2x32(d.y)));
  hi = vec4(uintBitsToFloat(unpackDouble2x32(d.z)), uintBitsToFloat(unpackDouble2x32(d.w)));
}

// Eight consecutive elements of a stored row from window element e; only the first cnt
// (0..8) exist, the others read as 0. VEC 1 and 2 guarantee cnt in {0, 4, 8}, resp. {0, 8}.
dvec4 load8_a(uint e, uint cnt) {
  if (VEC_A == 2u) return cnt >= 8u ? a8[e >> 3] : dvec4(0.0);
  vec4 lo = vec4(0.0), hi = vec4(0.0);
  if (VEC_A == 1u) {
    if (cnt >= 4u) lo = a4[e >> 2];
    if (cnt >= 8u) hi = a4[(e >> 2) + 1u];
  } else {
    [[unroll]] for (uint q = 0u; q < 4u; ++q) {
      if (q < cnt) lo[q] = a[e + q];
      if (q + 4u < cnt) hi[q] = a[e + 4u + q];
    }
  }
  return pk8(lo, hi);
}

dvec4 load8_b(uint e, uint cnt) {
  if (VEC_B == 2u) return cnt >= 8u ? b8[e >> 3] : dvec4(0.0);
  vec4 lo = vec4(0.0), hi = vec4(0.0);
  if (VEC_B == 1u) {
    if (cnt >= 4u) lo = b4[e >> 2];
    if (cnt >= 8u) hi = b4[(e >> 2) + 1u];
  } else {
    [[unroll]] for (uint q = 0u; q < 4u; ++q) {
      if (q < cnt) lo[q] = b[e + q];
      if (q + 4u < cnt) hi[q] = b[e + 4u + q];
    }
  }
  return pk8(lo, hi);
}

void main() {
  uint tile = dpt_group();
  uint row0 = (tile / pc.tiles_n) * BM;
  uint col0 = (tile % pc.tiles_n) * BN;
  if (row0 >= pc.m) return; // workgroups past the last tile (2-D grid rounding) leave together
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint tid = ty * 8u + tx;
  uint mlim = min(pc.m, row0 + BM); // rows of this tile

  vec4 acc[8 * RH][4]; // acc[i][g][c]: row 8ty + i (i < 8) / 64 + 8ty + i - 8, column of (g, c)
  [[unroll]] for (uint i = 0u; i < 8u * RH; ++i)
    [[unroll]] for (uint g = 0u; g < 4u; ++g) acc[i][g] = vec4(0.0);

  // Batch: workgroup layer z writes C_z and adds the items z*nsum .. z*nsum + nsum-1 in order
  // (nsum > 1 only for a summed batch, stride_c 0: one layer).
  uint item0 = gl_WorkGroupID.z * pc.nsum;
  for (uint it = 0u; it < pc.nsum; ++it) {
    uint a_base = pc.a_off + (item0 + it) * pc.stride_a;
    uint b_base = pc.b_off + (item0 + it) * pc.stride_b;
    for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
      [[unroll]] for (uint s = 0u; s < 4u; ++s) {
        uint l = tid + 64u * s;
        if (TRANS_A == 0u) {
          uint gr = row0 + (l >> 1), gk = k0 + 8u * (l & 1u);
          uint cnt = gr < mlim && gk < pc.k ? min(8u, pc.k - gk) : 0u;
          As[l] = load8_a(a_base + gr * pc.lda + gk, cnt);
        } else {
          uint gk = k0 + (l >> 4), gr = row0 + 8u * (l & 15u);
          uint cnt = gr < mlim && gk < pc.k ? min(8u, mlim - gr) : 0u;
          As[l] = load8_a(a_base + gk * pc.lda + gr, cnt);
        }
        if (TRANS_B == 0u) {
          uint gk = k0 + (l >> 4), gc = col0 + 8u * (l & 15u);
          uint cnt = gc < pc.n && gk < pc.k ? min(8u, pc.n - gc) : 0u;
          Bs[l] = load8_b(b_base + gk * pc.ldb + gc, cnt);
        } else {
          uint gc = col0 + (l >> 1), gk = k0 + 8u * (l & 1u);
          uint cnt = gc < pc.n && gk < pc.k ? min(8u, pc.k - gk) : 0u;
          Bs[l] = load8_b(b_base + gc * pc.ldb + gk, cnt);
        }
      }
      barrier();
      [[unroll]] for (uint h = 0u; h < 2u; ++h) {
        vec4 av[8 * RH][2]; // av[i][kk / 4][kk % 4] = op(A)[row i][k0 + 8h + kk]
        vec4 bv[8][4];  // bv[kk][g] = op(B)[k0 + 8h + kk][columns of g]
        if (TRANS_A == 0u) {
          [[unroll]] for (uint i = 0u; i < 8u * RH; ++i) {
            uint r = i < 8u ? 8u * ty + i : 64u + 8u * ty + i - 8u;
            unpk8(As[r * 2u + h], av[i][0], av[i][1]);
          }
        } else {
          [[unroll]] for (uint kk = 0u; kk < 8u; ++kk) {
            [[unroll]] for (uint half_ = 0u; half_ < RH; ++half_) {
              vec4 lo, hi;
              unpk8(As[(8u * h + kk) * 16u + 8u * half_ + ty], lo, hi);
              [[unroll]] for (uint q = 0u; q < 4u; ++q) {
                av[8u * half_ + q][kk / 4u][kk % 4u] = lo[q];
                av[8u * half_ + 4u + q][kk / 4u][kk % 4u] = hi[q];
              }
            }
          }
        }
        if (TRANS_B == 0u) {
          [[unroll]] for (uint kk = 0u; kk < 8u; ++kk) {
            unpk8(Bs[(8u * h + kk) * 16u + tx], bv[kk][0], bv[kk][1]);
            unpk8(Bs[(8u * h + kk) * 16u + 8u + tx], bv[kk][2], bv[kk][3]);
          }
        } else {
          [[unroll]] for (uint jj = 0u; jj < 16u; ++jj) {
            uint j = jj < 8u ? 8u * tx + jj : 64u + 8u * tx + jj - 8u;
            vec4 lo, hi;
            unpk8(Bs[j * 2u + h], lo, hi);
            [[unroll]] for (uint kk = 0u; kk < 4u; ++kk) {
              bv[kk][jj / 4u][jj % 4u] = lo[kk];
              bv[kk + 4u][jj / 4u][jj % 4u] = hi[kk];
            }
          }
        }
        [[unroll]] for (uint i = 0u; i < 8u * RH; ++i) {
          [[unroll]] for (uint g = 0u; g < 4u; ++g) {
            vec4 t = acc[i][g];
            [[unroll]] for (uint kk = 0u; kk < 8u; ++kk)
              t = fma(vec4(av[i][kk / 4u][kk % 4u]), bv[kk][g], t);
            acc[i][g] = t;
          }
        }
      }
      barrier();
    }
  }

  [[unroll]] for (uint i = 0u; i < 8u * RH; ++i) {
    uint r = row0 + (i < 8u ? 8u * ty + i : 64u + 8u * ty + i - 8u);
    if (r >= pc.m) continue;
    [[unroll]] for (uint g = 0u; g < 4u; ++g) {
      [[unroll]] for (uint q = 0u; q < 4u; ++q) {
        uint cc = col0 + (g < 2u ? 8u * tx + 4u * g : 64u + 8u * tx + 4u * (g - 2u)) + q;
        if (cc >= pc.n) continue;
        uint at = pc.c_off + gl_WorkGroupID.z * pc.stride_c + r * pc.ldc + cc;
        float v = pc.alpha * acc[i][g][q];
        if (pc.beta != 0.0) v += pc.beta * c[at];
        c[at] = v;
      }
    }
  }
}
