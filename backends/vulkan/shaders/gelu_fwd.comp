#version 450
#extension GL_GOOGLE_include_directive : require
// y = x * Phi(x) (gelu.glsl), one invocation per element of this dispatch; y may be x.
layout(local_size_x = 256) in;
#include "common.glsl"
#include "gelu.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P {
  uint n, x_off, y_off, approx;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  float v = x[pc.x_off + t], slope;
  y[pc.y_off + t] = v * dpt_gelu_eval(v, pc.approx, slope);
}
