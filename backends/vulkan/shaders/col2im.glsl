// The adjoint of im2col as a gather, for the whole batch in one dispatch: one invocation per
// segment of up to SEG elements of an image row (n = batch*c*h*segs, segs = ceil(w / SEG)); element x adds the col entries of
// every kernel offset (ki, kj) whose window covers it, in (ki, kj) order, so overlapping
// windows need no atomics and the sum is deterministic. The kernel rows ki covering the line
// are fixed per line; along the line the first kj (x + pw) mod sw and its output column
// (x + pw) / sw advance incrementally, so the loop over x has no division.
layout(local_size_x = 256) in;
#include "common.glsl"
DPT_INPUT_F32(0, col);
#define LOAD_COL(i) DPT_LOAD(col, i)
layout(std430, set = 0, binding = 1) writeonly buffer X { float dx[]; };
layout(push_constant) uniform P {
  uint n, col_off, dx_off, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow;
} pc;

const uint SEG = 32u; // bounds the loop iterations of an invocation (DPT_VK_LOOP_LIMIT)

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint segs = (pc.w + SEG - 1u) / SEG;
  uint line = t / segs, x0 = (t - line * segs) * SEG, x1 = min(x0 + SEG, pc.w);
  uint plane = line / pc.h, y = line - plane * pc.h; // plane = img*c + ch
  uint ohw = pc.oh * pc.ow;
  // col row of (ch, 0, 0) in image img: (img * c + ch) * kh*kw
  uint base = pc.col_off + plane * pc.kh * pc.kw * ohw;
  uint o = pc.dx_off + line * pc.w;
  // kernel rows ki = ki0 + j*sh with output row oy = oy0 - j (ki < kh, 0 <= oy < oh)
  uint yy = y + pc.ph;
  uint oy0 = yy / pc.sh, ki0 = yy - oy0 * pc.sh;
  uint xx = x0 + pc.pw;
  uint ox0 = xx / pc.sw, kj0 = xx - ox0 * pc.sw;
  for (uint x = x0; x < x1; ++x) {
    float acc = 0.0;
    for (uint ki = ki0, oy = oy0; ki < pc.kh && int(oy) >= 0; ki += pc.sh, --oy) {
      if (oy >= pc.oh) continue;
      for (uint kj = kj0, ox = ox0; kj < pc.kw && int(ox) >= 0; kj += pc.sw, --ox) {
        if (ox >= pc.ow) continue;
        acc += LOAD_COL(base + (ki * pc.kw + kj) * ohw + oy * pc.ow + ox);
      }
    }
    dx[o + x] = acc;
    if (++kj0 == pc.sw) {
      kj0 = 0u;
      ++ox0;
    }
  }
}
