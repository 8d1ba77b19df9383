#version 450
#extension GL_GOOGLE_include_directive : require
// AdamW, PyTorch semantics and order of operations (single-tensor path). The step-dependent
// scalars come from the host, computed in double and rounded once:
//   decay = 1 - lr*wd, step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t);
//   w *= decay; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
//   w -= step_size * (m / (sqrt(v) / bc2_sqrt + eps)).
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) buffer W { float w[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float grad[]; };
layout(std430, set = 0, binding = 2) buffer M { float mom[]; };
layout(std430, set = 0, binding = 3) buffer V { float var[]; };
layout(push_constant) uniform P {
  uint n, w_off, g_off, m_off, v_off;
  float beta1, beta2, eps, decay, step_size, bc2_sqrt, one_minus_b1, one_minus_b2;
} pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  float g = grad[pc.g_off + i];
  float wv = w[pc.w_off + i] * pc.decay;
  float m = pc.beta1 * mom[pc.m_off + i] + pc.one_minus_b1 * g;
  float v = pc.beta2 * var[pc.v_off + i] + pc.one_minus_b2 * g * g;
  mom[pc.m_off + i] = m;
  var[pc.v_off + i] = v;
  float denom = sqrt(v) / pc.bc2_sqrt + pc.eps;
  w[pc.w_off + i] = wv - pc.step_size * (m / denom);
}
