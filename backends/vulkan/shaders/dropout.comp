#version 450
#extension GL_GOOGLE_include_directive : require
// Dropout over x [rows, cols]: element (r, c) is kept when
// (mix(mix(key ^ (first_row + r)) ^ c) >> 8) >= threshold, mix the lowbias32 hash of
// backend_impl.h (dpt_mix32) in 32-bit unsigned arithmetic; y = keep ? x * scale : 0. y may be
// x (same window). One invocation per element of this dispatch's rows [row0, row0 + count/cols).
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P {
  uint n, x_off, y_off, cols, key, threshold, first_row;
  float scale;
} pc;

uint mix32(uint h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

void main() {
  uint t = dpt_gid();
  if (t >= pc.n) return;
  uint r = t / pc.cols, c = t - r * pc.cols;
  uint h = mix32(mix32(pc.key ^ (pc.first_row + r)) ^ c);
  float v = x[pc.x_off + t];
  y[pc.y_off + t] = (h >> 8) >= pc.threshold ? v * pc.scale : 0.0;
}
