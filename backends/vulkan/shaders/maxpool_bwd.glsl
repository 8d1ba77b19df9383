// dx[p, iy, ix] = sum of dy over the windows whose argmax is (iy, ix), as a gather: one
// invocation per dx element (n = planes * h * w) visits the windows covering it in (oy, ox)
// order, so overlapping windows need no atomics. Windows that do not overlap (kh <= sh,
// kw <= sw; push word blocks 1): one invocation per output (n = planes * oh * ow) writes its
// block of dx (rows oy*sh .. +sh, the last block to h; columns alike), 0 + dy at the argmax
// and 0 elsewhere, the values of the gather with one division per output instead of per input.
layout(local_size_x = 256) in;
#include "common.glsl"
DPT_INPUT_F32(0, dy);
#define LOAD_DY(i) DPT_LOAD(dy, i)
DPT_INPUT_I32(1, argmax);
#define LOAD_A(i) DPT_LOAD(argmax, i)
layout(std430, set = 0, binding = 2) writeonly buffer DX { float dx[]; };
layout(push_constant) uniform P {
  uint n, dy_off, a_off, dx_off, h, w, kh, kw, sh, sw, oh, ow, blocks;
} pc;

void blocks(uint t) {
  uint ox = t % pc.ow;
  uint oy = (t / pc.ow) % pc.oh;
  uint plane = t / (pc.ow * pc.oh);
  int a = LOAD_A(pc.a_off + t);
  float g = LOAD_DY(pc.dy_off + t);
  g = g == 0.0 ? 0.0 : g; // 0 + dy: -0 becomes +0
  uint y0 = oy * pc.sh, y1 = oy + 1u == pc.oh ? pc.h : y0 + pc.sh;
  uint x0 = ox * pc.sw, x1 = ox + 1u == pc.ow ? pc.w : x0 + pc.sw;
  uint base = pc.dx_off + plane * pc.h * pc.w;
  for (uint iy = y0; iy < y1; ++iy)
    for (uint ix = x0; ix < x1; ++ix) {
      uint i = iy * pc.w + ix;
      dx[base + i] = int(i) == a ? g : 0.0;
    }
}

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  if (pc.blocks != 0u) {
    blocks(t);
    return;
  }
  uint ix = t % pc.w;
  uint iy = (t / pc.w) % pc.h;
  uint plane = t / (pc.w * pc.h);
  int self = int(iy * pc.w + ix);
  // windows oy with oy*sh <= iy < oy*sh + kh
  uint oy0 = iy + 1u > pc.kh ? (iy + 1u - pc.kh + pc.sh - 1u) / pc.sh : 0u;
  uint oy1 = min(iy / pc.sh, pc.oh - 1u);
  uint ox0 = ix + 1u > pc.kw ? (ix + 1u - pc.kw + pc.sw - 1u) / pc.sw : 0u;
  uint ox1 = min(ix / pc.sw, pc.ow - 1u);
  uint obase = plane * pc.oh * pc.ow;
  float acc = 0.0;
  for (uint oy = oy0; oy <= oy1; ++oy) {
    for (uint ox = ox0; ox <= ox1; ++ox) {
      uint o = obase + oy * pc.ow + ox;
      if (LOAD_A(pc.a_off + o) == self) acc += LOAD_DY(pc.dy_off + o);
    }
  }
  dx[pc.dx_off + t] = acc;
}
