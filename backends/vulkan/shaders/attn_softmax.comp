#version 450
#extension GL_GOOGLE_include_directive : require
// Attention's softmax, one workgroup per row of scores [rows, k] (rows of heads * n * q):
//   probs = exp(scale * s - max) / sum over the keys not masked; a masked key gives 0, a row
//   whose keys are all masked is all 0. Row r of this dispatch is row base + r of the op's
//   [n, q] cycle (base < n * q): its sample is i = ((base + r) / q) % n, and key t is masked
//   when has_ids != 0 and ids[i * k + t] == pad_id. Each invocation reads and writes only its
//   own columns (lid, lid + 128, ...), so probs may be scores (in place).
layout(local_size_x = 128) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer I { int ids[]; };
layout(std430, set = 0, binding = 1) readonly buffer S { float scores[]; };
layout(std430, set = 0, binding = 2) buffer O { float probs[]; };
layout(push_constant) uniform P {
  uint rows, n, q, k, base, ids_off, s_off, p_off, has_ids;
  int pad_id;
  float scale;
} pc;

shared float sv[128];

void main() {
  uint row = dpt_group();
  uint lid = gl_LocalInvocationID.x;
  if (row >= pc.rows) return; // the whole workgroup leaves together
  uint sb = pc.s_off + row * pc.k, pb = pc.p_off + row * pc.k;
  uint ib = pc.ids_off + (((pc.base + row) / pc.q) % pc.n) * pc.k;

  float m = uintBitsToFloat(0xff800000u); // -inf: the maximum of no key
  for (uint t = lid; t < pc.k; t += 128u) {
    if (pc.has_ids == 0u || ids[ib + t] != pc.pad_id) {
      precise float v = pc.scale * scores[sb + t];
      m = max(m, v);
    }
  }
  sv[lid] = m;
  barrier();
  for (uint w = 64u; w > 0u; w >>= 1) {
    if (lid < w) sv[lid] = max(sv[lid], sv[lid + w]);
    barrier();
  }
  m = sv[0];
  barrier();

  float s = 0.0;
  for (uint t = lid; t < pc.k; t += 128u) {
    if (pc.has_ids == 0u || ids[ib + t] != pc.pad_id) {
      precise float v = pc.scale * scores[sb + t];
      s += exp(v - m);
    }
  }
  sv[lid] = s;
  barrier();
  for (uint w = 64u; w > 0u; w >>= 1) {
    if (lid < w) sv[lid] += sv[lid + w];
    barrier();
  }
  s = sv[0];

  float inv = s > 0.0 ? 1.0 / s : 0.0;
  for (uint t = lid; t < pc.k; t += 128u) {
    float e = 0.0;
    if (pc.has_ids == 0u || ids[ib + t] != pc.pad_id) {
      precise float v = pc.scale * scores[sb + t];
      e = exp(v - m);
    }
    probs[pb + t] = e * inv;
  }
}
