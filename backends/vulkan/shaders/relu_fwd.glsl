// y = max(x, 0), NaN propagates (as PyTorch); y may alias x.
layout(local_size_x = 256) in;
#include "common.glsl"
#ifdef DPT_TEX
layout(set = 0, binding = 0) uniform samplerBuffer x_tex;
#define LOAD_X(i) texelFetch(x_tex, int(i)).x
#else
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
#define LOAD_X(i) x[i]
#endif
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, x_off, y_off; } pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  float v = LOAD_X(pc.x_off + i);
  y[pc.y_off + i] = v > 0.0 || dpt_isnan(v) ? v : 0.0;
}
