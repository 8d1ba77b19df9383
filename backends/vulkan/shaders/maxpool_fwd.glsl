// y[p, oy, ox] = max over the window, argmax = iy*w + ix of the first maximal element in
// row-major order (the first NaN wins and propagates); one invocation per output (n = planes * oh * ow).
layout(local_size_x = 256) in;
#include "common.glsl"
DPT_INPUT_F32(0, x);
#define LOAD_X(i) DPT_LOAD(x, i)
layout(std430, set = 0, binding = 1) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) writeonly buffer A { int argmax[]; };
layout(push_constant) uniform P {
  uint n, x_off, y_off, a_off, h, w, kh, kw, sh, sw, oh, ow;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint ox = t % pc.ow;
  uint oy = (t / pc.ow) % pc.oh;
  uint plane = t / (pc.ow * pc.oh);
  uint base = pc.x_off + plane * pc.h * pc.w;
  uint y0 = oy * pc.sh, x0 = ox * pc.sw;
  uint best_i = y0 * pc.w + x0;
  float best = LOAD_X(base + best_i);
  for (uint ki = 0u; ki < pc.kh; ++ki) {
    for (uint kj = 0u; kj < pc.kw; ++kj) {
      uint i = (y0 + ki) * pc.w + x0 + kj;
      float v = LOAD_X(base + i);
      if (v > best || (dpt_isnan(v) && !dpt_isnan(best))) {
        best = v;
        best_i = i;
      }
    }
  }
  y[pc.y_off + t] = best;
  argmax[pc.a_off + t] = int(best_i);
}
