#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// gemm for CPU drivers (lavapipe): the contract of gemm.comp, with A and B read through uniform
// texel buffers and no shared memory or barriers.
//
// lavapipe runs 8 invocations as the lanes of one SIMD register; a load from a storage buffer
// whose address may differ between lanes is a loop over the lanes with a branch per
// component, inside loops even when the address is the same in all lanes, while a texel fetch
// is a branch-free gather (RGBA32F: one 16-byte load per lane, then a transpose). So A and B
// come as texel buffers: RGBA32F views where offsets, leading dimension and the contiguous
// extent are multiples of 4 (VEC_A, VEC_B 1), else R32F views (0).
//
// Each invocation owns 8 columns of C (c0 = col0 + 8x .. + 7) in RM = 16 rows; a workgroup is 8
// invocations (one SIMD register), a tile of 16 x 64. Per 4 k an invocation fetches 16 texels of
// op(A) (the same in every lane) and 8 of op(B) (its own columns) and does 512 multiply-adds;
// 32 rows ran as fast but took LLVM about 4x as long to compile (15 s a variant).
// Each C element sums its k products in order with fma, item after item, as gemm_cpu.glsl does,
// so both give the same bits.
// Specialization constants: TRANS_A, TRANS_B, VEC_A, VEC_B. Push constants: those of
// gemm_cpu.glsl, with vec_c the same alignment level (0..2) for C, which is stored as dvec2 or
// dvec4 where it allows (values only bit-packed, never computed in double).
layout(local_size_x = 8) in;
#include "common.glsl"
layout(constant_id = 0) const uint TRANS_A = 0;
layout(constant_id = 1) const uint TRANS_B = 0;
layout(constant_id = 2) const uint VEC_A = 0;
layout(constant_id = 3) const uint VEC_B = 0;
layout(set = 0, binding = 0) uniform samplerBuffer at;
layout(set = 0, binding = 1) uniform samplerBuffer bt;
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(std430, set = 0, binding = 2) buffer C2 { dvec2 c2[]; };
layout(std430, set = 0, binding = 2) buffer C8 { dvec4 c8[]; };
layout(push_constant) uniform P {
  uint m, n, k, lda, ldb, ldc, a_off, b_off, c_off;
  float alpha, beta;
  uint tiles_n;
  uint stride_a, stride_b, stride_c, nsum;
  uint vec_c;
} pc;

const uint RM = 16u;

// Elements e .. e + 3 of A (resp. B), of which the first cnt (0..4) count, the others read
// as 0. VEC 1: e % 4 == 0 and e .. e + 3 lie in the view; VEC 0: e lies in the view.
vec4 fetch4_a(uint e, uint cnt) {
  vec4 v;
  if (VEC_A != 0u) {
    v = texelFetch(at, int(e >> 2));
  } else {
    uint last = max(cnt, 1u) - 1u;
    v = vec4(texelFetch(at, int(e)).x, texelFetch(at, int(e + min(1u, last))).x,
             texelFetch(at, int(e + min(2u, last))).x, texelFetch(at, int(e + min(3u, last))).x);
  }
  [[unroll]] for (uint q = 0u; q < 4u; ++q)
    if (q >= cnt) v[q] = 0.0;
  return v;
}

vec4 fetch4_b(uint e, uint cnt) {
  vec4 v;
  if (VEC_B != 0u) {
    v = texelFetch(bt, int(e >> 2));
  } else {
    uint last = max(cnt, 1u) - 1u;
    v = vec4(texelFetch(bt, int(e)).x, texelFetch(bt, int(e + min(1u, last))).x,
             texelFetch(bt, int(e + min(2u, last))).x, texelFetch(bt, int(e + min(3u, last))).x);
  }
  [[unroll]] for (uint q = 0u; q < 4u; ++q)
    if (q >= cnt) v[q] = 0.0;
  return v;
}

// Where a run of 4 elements along an extent of len may start so that a fetch stays inside
// (runs past the end move back; their values are not used).
uint clamp_run(uint start, uint len, uint vec) {
  return min(start, len - (vec != 0u ? 4u : 1u));
}

vec4 acc[RM][2]; // acc[i][h] = C[row0 + i][c0 + 4h .. + 3]

vec4 pmul(vec4 a, vec4 b[4], vec4 t) {
  [[unroll]] for (uint kk = 0u; kk < 4u; ++kk) t = fma(vec4(a[kk]), b[kk], t);
  return t;
}

// Four k from k0, of which kc (1..4) exist.
void step4(uint a_base, uint b_base, uint row0, uint c0, uint k0, uint kc) {
  vec4 b0[4], b1[4]; // b<h>[kk] = op(B)[k0 + kk][c0 + 4h .. + 3]
  if (TRANS_B == 0u) {
    uint cs0 = clamp_run(c0, pc.n, VEC_B), cs1 = clamp_run(c0 + 4u, pc.n, VEC_B);
    uint n0 = min(4u, pc.n - cs0), n1 = min(4u, pc.n - cs1);
    [[unroll]] for (uint kk = 0u; kk < 4u; ++kk) {
      uint e = b_base + min(k0 + kk, pc.k - 1u) * pc.ldb;
      b0[kk] = fetch4_b(e + cs0, kk < kc ? n0 : 0u);
      b1[kk] = fetch4_b(e + cs1, kk < kc ? n1 : 0u);
    }
  } else {
    [[unroll]] for (uint j = 0u; j < 8u; ++j) {
      vec4 v = fetch4_b(b_base + min(c0 + j, pc.n - 1u) * pc.ldb + k0, kc); // k0 .. k0 + 3
      [[unroll]] for (uint kk = 0u; kk < 4u; ++kk) {
        if (j < 4u)
          b0[kk][j] = v[kk];
        else
          b1[kk][j - 4u] = v[kk];
      }
    }
  }
  if (TRANS_A == 0u) {
    [[unroll]] for (uint i = 0u; i < RM; ++i) {
      vec4 av = fetch4_a(a_base + min(row0 + i, pc.m - 1u) * pc.lda + k0, kc);
      acc[i][0] = pmul(av, b0, acc[i][0]);
      acc[i][1] = pmul(av, b1, acc[i][1]);
    }
  } else {
    [[unroll]] for (uint rq = 0u; rq < RM / 4u; ++rq) {
      uint rs = clamp_run(row0 + 4u * rq, pc.m, VEC_A), rn = min(4u, pc.m - rs);
      vec4 v[4]; // v[kk][q] = op(A)[row0 + 4rq + q][k0 + kk]
      [[unroll]] for (uint kk = 0u; kk < 4u; ++kk)
        v[kk] = fetch4_a(a_base + min(k0 + kk, pc.k - 1u) * pc.lda + rs, kk < kc ? rn : 0u);
      [[unroll]] for (uint q = 0u; q < 4u; ++q) {
        vec4 av = vec4(v[0][q], v[1][q], v[2][q], v[3][q]);
        acc[4u * rq + q][0] = pmul(av, b0, acc[4u * rq + q][0]);
        acc[4u * rq + q][1] = pmul(av, b1, acc[4u * rq + q][1]);
      }
    }
  }
}

vec4 unpk4(dvec2 d) {
  return vec4(uintBitsToFloat(unpackDouble2x32(d.x)), uintBitsToFloat(unpackDouble2x32(d.y)));
}

dvec2 pk4(vec4 v) {
  return dvec2(packDouble2x32(floatBitsToUint(v.xy)), packDouble2x32(floatBitsToUint(v.zw)));
}

// C[row][c .. c + ncol - 1] = alpha * v + beta * C (beta 0: C is not read).
void store4(uint at, uint ncol, vec4 v) {
  v *= pc.alpha;
  if (pc.vec_c != 0u) { // whole runs of 4
    if (pc.beta != 0.0) v += pc.beta * unpk4(c2[at >> 2]);
    c2[at >> 2] = pk4(v);
    return;
  }
  [[unroll]] for (uint q = 0u; q < 4u; ++q) {
    if (q >= ncol) break;
    float x = v[q];
    if (pc.beta != 0.0) x += pc.beta * c[at + q];
    c[at + q] = x;
  }
}

void main() {
  uint tile = dpt_group();
  uint row0 = (tile / pc.tiles_n) * RM;
  if (row0 >= pc.m) return; // workgroups past the last tile (2-D grid rounding) leave together
  uint c0 = (tile % pc.tiles_n) * 64u + 8u * gl_LocalInvocationID.x;

  [[unroll]] for (uint i = 0u; i < RM; ++i) acc[i][0] = acc[i][1] = vec4(0.0);

  uint item0 = gl_WorkGroupID.z * pc.nsum;
  for (uint it = 0u; it < pc.nsum; ++it) {
    uint a_base = pc.a_off + (item0 + it) * pc.stride_a;
    uint b_base = pc.b_off + (item0 + it) * pc.stride_b;
    uint k0 = 0u;
    for (; k0 + 4u <= pc.k; k0 += 4u) step4(a_base, b_base, row0, c0, k0, 4u);
    if (k0 < pc.k) step4(a_base, b_base, row0, c0, k0, pc.k - k0);
  }

  if (c0 >= pc.n) return;
  uint ncol = min(8u, pc.n - c0);
  [[unroll]] for (uint i = 0u; i < RM; ++i) {
    uint r = row0 + i;
    if (r >= pc.m) break;
    uint at = pc.c_off + gl_WorkGroupID.z * pc.stride_c + r * pc.ldc + c0;
    if (pc.vec_c == 2u) {
      vec4 lo = pc.alpha * acc[i][0], hi = pc.alpha * acc[i][1];
      if (pc.beta != 0.0) {
        dvec4 d = c8[at >> 3];
        lo += pc.beta * unpk4(d.xy);
        hi += pc.beta * unpk4(d.zw);
      }
      c8[at >> 3] = dvec4(pk4(lo), pk4(hi));
    } else {
      store4(at, ncol, acc[i][0]);
      if (ncol > 4u) store4(at + 4u, ncol - 4u, acc[i][1]);
    }
  }
}
