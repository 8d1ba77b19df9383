#version 450
#extension GL_GOOGLE_include_directive : require
// IEEE binary16 -> float32, exact, by bit manipulation (subnormals included; NaN keeps its payload and gets the quiet bit, as
// hardware converts).
// The source is read by 32-bit words; offsets count halves.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer S { uint src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer D { float dst[]; };
layout(push_constant) uniform P { uint n, src_off, dst_off; } pc;

float from_half(uint h) {
  uint sign = (h & 0x8000u) << 16;
  uint e = (h >> 10) & 0x1fu;
  uint m = h & 0x3ffu;
  uint bits;
  if (e == 0x1fu) {
    bits = sign | 0x7f800000u | (m << 13) | (m != 0u ? 0x00400000u : 0u);
  } else if (e != 0u) {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  } else if (m == 0u) {
    bits = sign;
  } else { // subnormal: normalize
    uint k = uint(findMSB(m)); // 0..9
    bits = sign | ((k + 103u) << 23) | ((m << (23u - k)) & 0x7fffffu);
  }
  return uintBitsToFloat(bits);
}

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  uint q = pc.src_off + i;
  uint word = src[q >> 1];
  uint h = (q & 1u) != 0u ? word >> 16 : word & 0xffffu;
  dst[pc.dst_off + i] = from_half(h);
}
