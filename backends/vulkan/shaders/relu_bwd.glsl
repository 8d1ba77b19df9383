// dx = x > 0 ? dy : 0; dx may alias dy.
layout(local_size_x = 256) in;
#include "common.glsl"
DPT_INPUT_F32(0, x);
#define LOAD_X(i) DPT_LOAD(x, i)
DPT_INPUT_F32(1, dy);
#define LOAD_DY(i) DPT_LOAD(dy, i)
layout(std430, set = 0, binding = 2) buffer DX { float dx[]; };
layout(push_constant) uniform P { uint n, x_off, dy_off, dx_off; } pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  float g = LOAD_DY(pc.dy_off + i);
  dx[pc.dx_off + i] = LOAD_X(pc.x_off + i) > 0.0 ? g : 0.0;
}
