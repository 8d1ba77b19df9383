#version 450
#extension GL_GOOGLE_include_directive : require
// SGD, PyTorch semantics (dampening 0):
//   g = grad + wd * w; v = momentum * v + g; step = nesterov ? g + momentum * v : v;
//   w -= lr * step. Without a velocity buffer (has_v == 0) step = g. The decay term is skipped
//   when wd == 0 (as PyTorch), so an infinite weight does not become NaN through 0 * inf.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) buffer W { float w[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float grad[]; };
layout(std430, set = 0, binding = 2) buffer V { float vel[]; };
layout(push_constant) uniform P {
  uint n, w_off, g_off, v_off;
  float lr, momentum, wd;
  uint nesterov, has_v;
} pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  float wv = w[pc.w_off + i];
  float g = grad[pc.g_off + i];
  if (pc.wd != 0.0) g += pc.wd * wv;
  float step = g;
  if (pc.has_v != 0u) {
    float v = pc.momentum * vel[pc.v_off + i] + g;
    vel[pc.v_off + i] = v;
    step = pc.nesterov != 0u ? g + pc.momentum * v : v;
  }
  w[pc.w_off + i] = wv - pc.lr * step;
}
