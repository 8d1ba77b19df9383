// col[i, (c*kh + ki)*kw + kj, oy*ow + ox] = x[i, c, oy*sh - ph + ki, ox*sw - pw + kj], 0 outside,
// for the whole batch in one dispatch: one invocation per line (a col row of one image and one
// output row oy; n = batch * c*kh*kw * oh lines) writes its ow elements, so the index
// arithmetic (divisions included) is paid per line and the loop over ox only adds.
layout(local_size_x = 256) in;
#include "common.glsl"
DPT_INPUT_F32(0, x);
#define LOAD_X(i) DPT_LOAD(x, i)
layout(std430, set = 0, binding = 1) writeonly buffer C { float col[]; };
layout(push_constant) uniform P {
  uint n, x_off, col_off, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow;
} pc;

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint r = t / pc.oh, oy = t - r * pc.oh; // r: col row over the batch, (img*c + ch)*kh*kw + ...
  uint r2 = r / pc.kw, kj = r - r2 * pc.kw;
  uint plane = r2 / pc.kh, ki = r2 - plane * pc.kh; // plane = img*c + ch
  uint o = pc.col_off + t * pc.ow;
  int iy = int(oy * pc.sh + ki) - int(pc.ph);
  if (iy < 0 || uint(iy) >= pc.h) {
    for (uint ox = 0u; ox < pc.ow; ++ox) col[o + ox] = 0.0;
    return;
  }
  uint row = pc.x_off + (plane * pc.h + uint(iy)) * pc.w;
  int ix = int(kj) - int(pc.pw);
  for (uint ox = 0u; ox < pc.ow; ++ox, ix += int(pc.sw))
    col[o + ox] = ix >= 0 && uint(ix) < pc.w ? LOAD_X(row + uint(ix)) : 0.0;
}
