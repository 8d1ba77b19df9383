// y = max(x, 0), NaN propagates (as PyTorch); y may alias x.
layout(local_size_x = 256) in;
#include "common.glsl"
DPT_INPUT_F32(0, x);
#define LOAD_X(i) DPT_LOAD(x, i)
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, x_off, y_off; } pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  float v = LOAD_X(pc.x_off + i);
  y[pc.y_off + i] = v > 0.0 || dpt_isnan(v) ? v : 0.0;
}
