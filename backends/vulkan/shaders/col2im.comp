#version 450
#extension GL_GOOGLE_include_directive : require
// The adjoint of im2col as a gather: one invocation per dx element (n = batch*c*h*w) adds the
// col entries of every kernel offset (ki, kj) whose window covers it, in (ki, kj) order, so
// overlapping windows need no atomics and the sum is deterministic.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer C { float col[]; };
layout(std430, set = 0, binding = 1) writeonly buffer X { float dx[]; };
layout(push_constant) uniform P {
  uint n, col_off, dx_off, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint x = t % pc.w;
  uint y = (t / pc.w) % pc.h;
  uint plane = t / (pc.w * pc.h); // img * c + ch
  uint ohw = pc.oh * pc.ow;
  uint kk = pc.kh * pc.kw;
  // col row of (ch, 0, 0) in image img: (img * c + ch) * kk
  uint base = pc.col_off + plane * kk * ohw;
  float acc = 0.0;
  for (uint ki = 0u; ki < pc.kh; ++ki) {
    int ty = int(y + pc.ph) - int(ki);
    if (ty < 0 || uint(ty) % pc.sh != 0u) continue;
    uint oy = uint(ty) / pc.sh;
    if (oy >= pc.oh) continue;
    for (uint kj = 0u; kj < pc.kw; ++kj) {
      int tx = int(x + pc.pw) - int(kj);
      if (tx < 0 || uint(tx) % pc.sw != 0u) continue;
      uint ox = uint(tx) / pc.sw;
      if (ox >= pc.ow) continue;
      acc += col[base + (ki * pc.kw + kj) * ohw + oy * pc.ow + ox];
    }
  }
  dx[pc.dx_off + t] = acc;
}
