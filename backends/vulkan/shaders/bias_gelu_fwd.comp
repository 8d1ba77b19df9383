#version 450
#extension GL_GOOGLE_include_directive : require
// Linear's bias and GELU fused: x[r, c] += bias[c] (x keeps the pre-activation), y = x Phi(x)
// (gelu.glsl); one invocation per element of this dispatch, which starts at a row.
layout(local_size_x = 256) in;
#include "common.glsl"
#include "gelu.glsl"
layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float bias[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P {
  uint n, x_off, b_off, y_off, cols, approx;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  float v = x[pc.x_off + t] + bias[pc.b_off + t % pc.cols], slope;
  x[pc.x_off + t] = v;
  y[pc.y_off + t] = v * dpt_gelu_eval(v, pc.approx, slope);
}
