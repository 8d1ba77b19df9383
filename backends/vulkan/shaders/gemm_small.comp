#version 450
#extension GL_GOOGLE_include_directive : require
// gemm for shapes the tiled kernels would mostly pad (k of a few, or a C of a few rows or
// columns: a bias as a rank-1 product, its gradient as a matrix-vector product, a small
// convolution's weight gradient): one invocation per element of C, the dot product along k
// for each summed item in order. The push constants and batch layout are those of gemm.comp:
// workgroup layer gl_WorkGroupID.z writes C_z = alpha * sum of nsum items + beta * C_z (beta 0
// does not read C). Specialization constants TRANS_A, TRANS_B. The host keeps nsum * k / 4
// below lavapipe's loop budget (DPT_VK_LOOP_LIMIT in vk_internal.h).
layout(local_size_x = 64) in;
#include "common.glsl"
layout(constant_id = 0) const uint TRANS_A = 0;
layout(constant_id = 1) const uint TRANS_B = 0;
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P {
  uint m, n, k, lda, ldb, ldc, a_off, b_off, c_off;
  float alpha, beta;
  uint tiles_n; // unused
  uint stride_a, stride_b, stride_c, nsum;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.m * pc.n) return;
  uint r = t / pc.n, col = t - r * pc.n;
  // element (r, p) of op(A) at ea + p * sa, element (p, col) of op(B) at eb + p * sb
  uint sa = TRANS_A != 0u ? pc.lda : 1u;
  uint sb = TRANS_B != 0u ? 1u : pc.ldb;
  uint ea = TRANS_A != 0u ? r : r * pc.lda;
  uint eb = TRANS_B != 0u ? col * pc.ldb : col;
  uint item0 = gl_WorkGroupID.z * pc.nsum;
  float acc = 0.0;
  for (uint it = 0u; it < pc.nsum; ++it) {
    uint pa = pc.a_off + (item0 + it) * pc.stride_a + ea;
    uint pb = pc.b_off + (item0 + it) * pc.stride_b + eb;
    uint p = 0u;
    for (; p + 4u <= pc.k; p += 4u) {
      acc = fma(a[pa], b[pb], acc);
      acc = fma(a[pa + sa], b[pb + sb], acc);
      acc = fma(a[pa + 2u * sa], b[pb + 2u * sb], acc);
      acc = fma(a[pa + 3u * sa], b[pb + 3u * sb], acc);
      pa += 4u * sa;
      pb += 4u * sb;
    }
    for (; p < pc.k; ++p) {
      acc = fma(a[pa], b[pb], acc);
      pa += sa;
      pb += sb;
    }
  }
  uint at = pc.c_off + gl_WorkGroupID.z * pc.stride_c + r * pc.ldc + col;
  float v = pc.alpha * acc;
  if (pc.beta != 0.0) v += pc.beta * c[at];
  c[at] = v;
}
