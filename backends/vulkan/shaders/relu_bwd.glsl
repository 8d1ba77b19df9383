// dx = x > 0 ? dy : 0; dx may alias dy.
layout(local_size_x = 256) in;
#include "common.glsl"
#ifdef DPT_TEX
layout(set = 0, binding = 0) uniform samplerBuffer x_tex;
#define LOAD_X(i) texelFetch(x_tex, int(i)).x
#else
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
#define LOAD_X(i) x[i]
#endif
#ifdef DPT_TEX
layout(set = 0, binding = 1) uniform samplerBuffer dy_tex;
#define LOAD_DY(i) texelFetch(dy_tex, int(i)).x
#else
layout(std430, set = 0, binding = 1) readonly buffer DY { float dy[]; };
#define LOAD_DY(i) dy[i]
#endif
layout(std430, set = 0, binding = 2) buffer DX { float dx[]; };
layout(push_constant) uniform P { uint n, x_off, dy_off, dx_off; } pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  float g = LOAD_DY(pc.dy_off + i);
  dx[pc.dx_off + i] = LOAD_X(pc.x_off + i) > 0.0 ? g : 0.0;
}
