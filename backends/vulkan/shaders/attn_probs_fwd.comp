#version 450
#extension GL_GOOGLE_include_directive : require
// Attention's probabilities of one head, fused, one workgroup per row of probs [n * q, k]:
//   the softmax of attn_softmax.comp in place (scores in, probabilities out), and with
//   has_drop != 0 the dropout of dropout.comp into dropped: row r of the op (base + row of this
//   dispatch) is query j = r % q of sample i = r / q, kept when
//   (mix(mix(key ^ (first_row + i)) ^ (j * k + t)) >> 8) >= threshold, then times drop_scale.
// Each invocation reads and writes only its own columns (lid, lid + 128, ...).
layout(local_size_x = 128) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer I { int ids[]; };
layout(std430, set = 0, binding = 1) buffer O { float probs[]; };
layout(std430, set = 0, binding = 2) buffer D { float dropped[]; };
layout(push_constant) uniform P {
  uint rows, q, k, base, ids_off, p_off, d_off, has_ids;
  int pad_id;
  float scale;
  uint has_drop, key, threshold, first_row;
  float drop_scale;
} pc;

shared float sv[128];

uint mix32(uint h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

bool unmasked(uint ib, uint t) { return pc.has_ids == 0u || ids[ib + t] != pc.pad_id; }

void main() {
  uint row = dpt_group();
  uint lid = gl_LocalInvocationID.x;
  if (row >= pc.rows) return; // the whole workgroup leaves together
  uint r = pc.base + row, i = r / pc.q, j = r - i * pc.q;
  uint pb = pc.p_off + row * pc.k, db = pc.d_off + row * pc.k, ib = pc.ids_off + i * pc.k;

  float m = uintBitsToFloat(0xff800000u); // -inf: the maximum of no key
  for (uint t = lid; t < pc.k; t += 128u) {
    if (unmasked(ib, t)) {
      precise float v = pc.scale * probs[pb + t];
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
    if (unmasked(ib, t)) {
      precise float v = pc.scale * probs[pb + t];
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
  uint hr = mix32(pc.key ^ (pc.first_row + i));
  for (uint t = lid; t < pc.k; t += 128u) {
    float e = 0.0;
    if (unmasked(ib, t)) {
      precise float v = pc.scale * probs[pb + t];
      e = exp(v - m);
    }
    float p = e * inv;
    probs[pb + t] = p;
    if (pc.has_drop != 0u) {
      uint h = mix32(hr ^ (j * pc.k + t));
      dropped[db + t] = (h >> 8) >= pc.threshold ? p * pc.drop_scale : 0.0;
    }
  }
}
