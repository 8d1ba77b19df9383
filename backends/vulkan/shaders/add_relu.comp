#version 450
#extension GL_GOOGLE_include_directive : require
// y = max(a + b, 0), NaN kept (as relu_fwd); y may alias a or b.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) buffer A { float a[]; };
layout(std430, set = 0, binding = 1) buffer B { float b[]; };
layout(std430, set = 0, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, a_off, b_off, y_off; } pc;

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  precise float v = a[pc.a_off + i] + b[pc.b_off + i];
  y[pc.y_off + i] = v > 0.0 || dpt_isnan(v) ? v : 0.0;
}
