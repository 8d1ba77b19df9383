#version 450
#extension GL_GOOGLE_include_directive : require
// dx = dy * gelu'(x) (gelu.glsl), one invocation per element of this dispatch; dx may be dy.
layout(local_size_x = 256) in;
#include "common.glsl"
#include "gelu.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 2) buffer DX { float dx[]; };
layout(push_constant) uniform P {
  uint n, x_off, dy_off, dx_off, approx;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  float slope;
  dpt_gelu_eval(x[pc.x_off + t], pc.approx, slope);
  dx[pc.dx_off + t] = dy[pc.dy_off + t] * slope;
}
