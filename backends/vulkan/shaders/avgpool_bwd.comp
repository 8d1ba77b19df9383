#version 450
#extension GL_GOOGLE_include_directive : require
// The adjoint of avgpool_fwd as a gather: one invocation per dx element [planes, h, w] adds
// dy / (kh*kw) of every window holding it, windows in row-major output order (the order the
// CPU backend scatters them), so dx is overwritten without atomics.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 1) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform P {
  uint n, dy_off, dx_off, h, w, kh, kw, sh, sw, oh, ow;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint hw = pc.h * pc.w;
  uint plane = t / hw, e = t - plane * hw;
  uint y = e / pc.w, x = e - y * pc.w;
  // windows oy with oy*sh <= y < oy*sh + kh, likewise ox
  uint oy0 = y + 1u > pc.kh ? (y + 1u - pc.kh + pc.sh - 1u) / pc.sh : 0u;
  uint oy1 = min(y / pc.sh + 1u, pc.oh);
  uint ox0 = x + 1u > pc.kw ? (x + 1u - pc.kw + pc.sw - 1u) / pc.sw : 0u;
  uint ox1 = min(x / pc.sw + 1u, pc.ow);
  float area = float(pc.kh * pc.kw);
  uint base = pc.dy_off + plane * pc.oh * pc.ow;
  float s = 0.0;
  for (uint oy = oy0; oy < oy1; ++oy)
    for (uint ox = ox0; ox < ox1; ++ox) s += dy[base + oy * pc.ow + ox] / area;
  dx[pc.dx_off + t] = s;
}
