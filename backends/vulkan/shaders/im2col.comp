#version 450
#extension GL_GOOGLE_include_directive : require
// col[i, (c*kh + ki)*kw + kj, oy*ow + ox] = x[i, c, oy*sh - ph + ki, ox*sw - pw + kj], 0 outside;
// one invocation per col element (n = batch * c*kh*kw * oh*ow).
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer C { float col[]; };
layout(push_constant) uniform P {
  uint n, x_off, col_off, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint ohw = pc.oh * pc.ow;
  uint kk = pc.kh * pc.kw;
  uint p = t % ohw;
  uint r = t / ohw;
  uint row = r % (pc.c * kk);
  uint img = r / (pc.c * kk);
  uint ch = row / kk;
  uint ki = (row % kk) / pc.kw;
  uint kj = row % pc.kw;
  int iy = int((p / pc.ow) * pc.sh + ki) - int(pc.ph);
  int ix = int((p % pc.ow) * pc.sw + kj) - int(pc.pw);
  float v = 0.0;
  if (iy >= 0 && ix >= 0 && uint(iy) < pc.h && uint(ix) < pc.w)
    v = x[pc.x_off + ((img * pc.c + ch) * pc.h + uint(iy)) * pc.w + uint(ix)];
  col[pc.col_off + t] = v;
}
