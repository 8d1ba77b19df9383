#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// C[m, n] = alpha * op(A) * op(B) + beta * C, row-major with leading dimensions; beta == 0
// never reads C. Specialization constants: TRANS_A / TRANS_B select op(X) = X^T; VEC_A / VEC_B
// say the operand may be read as vec4 (its window offset and leading dimension are multiples
// of 4, and so is the dimension it is contiguous along), else it is read element by element.
//
// Tiling: a workgroup of 8 x 8 invocations owns a 64 x 64 tile of C; invocation (tx, ty)
// accumulates 8 x 8 outputs: rows 4ty + {0..3} and 32 + 4ty + {0..3}, columns 4tx + {0..3} and
// 32 + 4tx + {0..3}. k advances BK = 16 at a time: the workgroup stages the 64 x 16 slice of
// op(A) and the 16 x 64 slice of op(B) in shared memory, each in the orientation of its stored
// rows, so a vec4 read from global memory is a vec4 written to shared memory; then every
// invocation reads 16 vec4 per 4 k steps for 256 multiply-adds. Few, wide memory accesses per
// multiply-add matter on GPUs and even more on CPU drivers (lavapipe), where every load or
// store instruction is a loop over the SIMD lanes.
// Cost: 2 m n k flops; per 64 x 64 x 16 step, 2 * 1024 floats read from global memory.
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
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint m, n, k, lda, ldb, ldc, a_off, b_off, c_off;
  float alpha, beta;
  uint tiles_n;
  uint stride_a, stride_b, stride_c, nsum;
} pc;

const uint BM = 64u, BN = 64u, BK = 16u;
// !TRANS_A: As[i * BK/4 + p/4][p % 4] = op(A)[row0 + i][k0 + p]  (stored rows run along k)
//  TRANS_A: As[p * BM/4 + i/4][i % 4] = op(A)[row0 + i][k0 + p]  (stored rows run along m)
// Bs likewise: !TRANS_B along n (Bs[p * BN/4 + j/4]), TRANS_B along k (Bs[j * BK/4 + p/4]).
shared vec4 As[BM * BK / 4u];
shared vec4 Bs[BK * BN / 4u];

// Four consecutive elements of a stored row starting at element e (window-relative, e + 3 in
// the row when `full`, else only the first `cnt` exist; missing ones read as 0).
vec4 load_a(uint e, uint cnt) {
  if (VEC_A != 0u) return cnt >= 4u ? a4[e >> 2] : vec4(0.0);
  vec4 v = vec4(0.0);
  [[unroll]] for (uint q = 0u; q < 4u; ++q)
    if (q < cnt) v[q] = a[e + q];
  return v;
}

vec4 load_b(uint e, uint cnt) {
  if (VEC_B != 0u) return cnt >= 4u ? b4[e >> 2] : vec4(0.0);
  vec4 v = vec4(0.0);
  [[unroll]] for (uint q = 0u; q < 4u; ++q)
    if (q < cnt) v[q] = b[e + q];
  return v;
}

void main() {
  uint tile = dpt_group();
  uint row0 = (tile / pc.tiles_n) * BM;
  uint col0 = (tile % pc.tiles_n) * BN;
  if (row0 >= pc.m) return; // workgroups past the last tile (2-D grid rounding) leave together
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint tid = ty * 8u + tx;

  vec4 acc[8][2]; // acc[i][g][q]: row (i < 4 ? 4ty + i : 32 + 4ty + i - 4), column 32g + 4tx + q
  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    acc[i][0] = vec4(0.0);
    acc[i][1] = vec4(0.0);
  }

  // Batch: workgroup layer z writes C_z and adds the items z*nsum .. z*nsum + nsum-1 in order
  // (nsum > 1 only for a summed batch, stride_c 0: one layer).
  uint item0 = gl_WorkGroupID.z * pc.nsum;
  for (uint it = 0u; it < pc.nsum; ++it) {
    uint a_base = pc.a_off + (item0 + it) * pc.stride_a;
    uint b_base = pc.b_off + (item0 + it) * pc.stride_b;
    for (uint k0 = 0u; k0 < pc.k; k0 += BK) {
      // stage: 256 vec4 slots per operand, 4 per invocation
      [[unroll]] for (uint s = 0u; s < 4u; ++s) {
        uint l = tid + 64u * s;
        if (TRANS_A == 0u) {
          uint i = l >> 2, p = 4u * (l & 3u); // row i, k p..p+3
          uint gr = row0 + i, gk = k0 + p;
          uint cnt = gr < pc.m && gk < pc.k ? min(4u, pc.k - gk) : 0u;
          As[l] = load_a(a_base + gr * pc.lda + gk, cnt);
        } else {
          uint p = l >> 4, i = 4u * (l & 15u); // k p, rows i..i+3
          uint gr = row0 + i, gk = k0 + p;
          uint cnt = gr < pc.m && gk < pc.k ? min(4u, pc.m - gr) : 0u;
          As[l] = load_a(a_base + gk * pc.lda + gr, cnt);
        }
        if (TRANS_B == 0u) {
          uint p = l >> 4, j = 4u * (l & 15u); // k p, columns j..j+3
          uint gc = col0 + j, gk = k0 + p;
          uint cnt = gc < pc.n && gk < pc.k ? min(4u, pc.n - gc) : 0u;
          Bs[l] = load_b(b_base + gk * pc.ldb + gc, cnt);
        } else {
          uint j = l >> 2, p = 4u * (l & 3u); // column j, k p..p+3
          uint gc = col0 + j, gk = k0 + p;
          uint cnt = gc < pc.n && gk < pc.k ? min(4u, pc.k - gk) : 0u;
          Bs[l] = load_b(b_base + gc * pc.ldb + gk, cnt);
        }
      }
      barrier();
      [[unroll]] for (uint q = 0u; q < BK / 4u; ++q) {
        // av[i][kk] = op(A)[row i][k0 + 4q + kk]; bv[kk][g] = op(B)[k0 + 4q + kk][columns of g]
        vec4 av[8];
        vec4 bv[4][2];
        if (TRANS_A == 0u) {
          [[unroll]] for (uint i = 0u; i < 8u; ++i) {
            uint r = i < 4u ? 4u * ty + i : 32u + 4u * ty + i - 4u;
            av[i] = As[r * (BK / 4u) + q];
          }
        } else {
          [[unroll]] for (uint kk = 0u; kk < 4u; ++kk) {
            vec4 lo = As[(4u * q + kk) * (BM / 4u) + ty];
            vec4 hi = As[(4u * q + kk) * (BM / 4u) + 8u + ty];
            [[unroll]] for (uint i = 0u; i < 4u; ++i) {
              av[i][kk] = lo[i];
              av[i + 4u][kk] = hi[i];
            }
          }
        }
        if (TRANS_B == 0u) {
          [[unroll]] for (uint kk = 0u; kk < 4u; ++kk) {
            bv[kk][0] = Bs[(4u * q + kk) * (BN / 4u) + tx];
            bv[kk][1] = Bs[(4u * q + kk) * (BN / 4u) + 8u + tx];
          }
        } else {
          [[unroll]] for (uint g = 0u; g < 2u; ++g) {
            [[unroll]] for (uint jq = 0u; jq < 4u; ++jq) {
              vec4 col = Bs[(32u * g + 4u * tx + jq) * (BK / 4u) + q];
              [[unroll]] for (uint kk = 0u; kk < 4u; ++kk) bv[kk][g][jq] = col[kk];
            }
          }
        }
        [[unroll]] for (uint kk = 0u; kk < 4u; ++kk) {
          [[unroll]] for (uint i = 0u; i < 8u; ++i) {
            acc[i][0] = fma(vec4(av[i][kk]), bv[kk][0], acc[i][0]);
            acc[i][1] = fma(vec4(av[i][kk]), bv[kk][1], acc[i][1]);
          }
        }
      }
      barrier();
    }
  }

  [[unroll]] for (uint i = 0u; i < 8u; ++i) {
    uint r = row0 + (i < 4u ? 4u * ty + i : 32u + 4u * ty + i - 4u);
    if (r >= pc.m) continue;
    [[unroll]] for (uint g = 0u; g < 2u; ++g) {
      [[unroll]] for (uint q = 0u; q < 4u; ++q) {
        uint cc = col0 + 32u * g + 4u * tx + q;
        if (cc >= pc.n) continue;
        uint at = pc.c_off + gl_WorkGroupID.z * pc.stride_c + r * pc.ldc + cc;
        float v = pc.alpha * acc[i][g][q];
        if (pc.beta != 0.0) v += pc.beta * c[at];
        c[at] = v;
      }
    }
  }
}
