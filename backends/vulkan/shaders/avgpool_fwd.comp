#version 450
#extension GL_GOOGLE_include_directive : require
// y[p, oy, ox] = mean of the kh x kw window of x [planes, h, w] (no padding): the window sum in
// row-major order divided by kh*kw; one invocation per output.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P {
  uint n, x_off, y_off, h, w, kh, kw, sh, sw, oh, ow;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint ohw = pc.oh * pc.ow;
  uint plane = t / ohw, o = t - plane * ohw;
  uint oy = o / pc.ow, ox = o - oy * pc.ow;
  uint base = pc.x_off + (plane * pc.h + oy * pc.sh) * pc.w + ox * pc.sw;
  float s = 0.0;
  for (uint ki = 0u; ki < pc.kh; ++ki)
    for (uint kj = 0u; kj < pc.kw; ++kj) s += x[base + ki * pc.w + kj];
  y[pc.y_off + t] = s / float(pc.kh * pc.kw);
}
