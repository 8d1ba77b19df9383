#version 450
#extension GL_GOOGLE_include_directive : require
// Softmax cross-entropy, one workgroup per row of logits [rows, cols]:
//   p = softmax(row); loss = log(sum exp(x - max)) - (x[label] - max);
//   dlogits = scale * (p - onehot(label)) (flag 1); a label equal to DPT_IGNORE_INDEX (-100)
//   gives loss 0 (adds nothing), any other label outside [0, cols) loss NaN; both give a zero
//   gradient row and never count as correct.
// With flag 2 the row's loss (float bits) goes to part[part_off + row] and whether the first
// maximal logit is the label to part[part_off + rows + row]; the host adds them in double.
layout(local_size_x = 128) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer L { float logits[]; };
layout(std430, set = 0, binding = 1) readonly buffer Y { int labels[]; };
layout(std430, set = 0, binding = 2) writeonly buffer D { float dlogits[]; };
layout(std430, set = 0, binding = 3) writeonly buffer R { uint part[]; };
layout(push_constant) uniform P {
  uint rows, cols, logits_off, labels_off, dl_off, part_off, flags;
  float scale;
} pc;

const uint NONE = 0xffffffffu;
const int IGNORE_INDEX = -100; // DPT_IGNORE_INDEX of dptrain/backend.h
shared float sv[128];
shared uint si[128];

void main() {
  uint row = dpt_group();
  uint lid = gl_LocalInvocationID.x;
  if (row >= pc.rows) return; // the whole workgroup leaves together
  uint base = pc.logits_off + row * pc.cols;

  // maximum and the first column holding it
  float m = 0.0;
  uint mi = NONE;
  for (uint c = lid; c < pc.cols; c += 128u) {
    float v = logits[base + c];
    if (mi == NONE || v > m) {
      m = v;
      mi = c;
    }
  }
  sv[lid] = m;
  si[lid] = mi;
  barrier();
  for (uint w = 64u; w > 0u; w >>= 1) {
    if (lid < w) {
      float om = sv[lid + w];
      uint oi = si[lid + w];
      if (oi != NONE && (si[lid] == NONE || om > sv[lid] || (om == sv[lid] && oi < si[lid]))) {
        sv[lid] = om;
        si[lid] = oi;
      }
    }
    barrier();
  }
  m = sv[0];
  mi = si[0];
  barrier();

  float s = 0.0;
  for (uint c = lid; c < pc.cols; c += 128u) s += exp(logits[base + c] - m);
  sv[lid] = s;
  barrier();
  for (uint w = 64u; w > 0u; w >>= 1) {
    if (lid < w) sv[lid] += sv[lid + w];
    barrier();
  }
  s = sv[0];

  int label = labels[pc.labels_off + row];
  bool valid = label >= 0 && uint(label) < pc.cols;
  if ((pc.flags & 1u) != 0u) {
    float inv = 1.0 / s;
    for (uint c = lid; c < pc.cols; c += 128u) {
      float g = 0.0;
      if (valid) {
        float p = exp(logits[base + c] - m) * inv;
        g = pc.scale * (p - (c == uint(label) ? 1.0 : 0.0));
      }
      dlogits[pc.dl_off + row * pc.cols + c] = g;
    }
  }
  if ((pc.flags & 2u) != 0u && lid == 0u) {
    float loss = valid ? log(s) - (logits[base + uint(label)] - m)
                       : (label == IGNORE_INDEX ? 0.0 : DPT_NAN);
    part[pc.part_off + row] = floatBitsToUint(loss);
    part[pc.part_off + pc.rows + row] = (valid && mi == uint(label)) ? 1u : 0u;
  }
}
