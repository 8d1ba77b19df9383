#version 450
#extension GL_GOOGLE_include_directive : require
// Binary cross-entropy with logits, one invocation per logit x with label y:
//   y in {0, 1}: loss = max(x, 0) - x * y + log1p(exp(-|x|)), dlogits = scale * (sigmoid(x) - y)
//   y == DPT_IGNORE_INDEX (-100): loss 0, gradient 0; any other label: loss NaN, gradient 0;
//   neither is ever correct.
// flag 1: the gradient (dlogits may be logits: each invocation reads its logit first); flag 2:
// the loss (float bits) to part[part_off + i] and (x > 0) == y to part[part_off + n + i]; the
// host adds them in double, as softmax_xent's rows.
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer L { float logits[]; };
layout(std430, set = 0, binding = 1) readonly buffer Y { int labels[]; };
layout(std430, set = 0, binding = 2) writeonly buffer D { float dlogits[]; };
layout(std430, set = 0, binding = 3) writeonly buffer R { uint part[]; };
layout(push_constant) uniform P {
  uint n, logits_off, labels_off, dl_off, part_off, flags;
  float scale;
} pc;

const int IGNORE_INDEX = -100; // DPT_IGNORE_INDEX of dptrain/backend.h

// log(1 + e) for e in [0, 1], accurate for small e (GLSL has no log1p): the rounding of 1 + e
// cancels in log(u) * e / (u - 1).
float dpt_log1p(float e) {
  precise float u = 1.0 + e;
  precise float um = u - 1.0;
  return u == 1.0 ? e : log(u) * (e / um);
}

void main() {
  uint i = dpt_gid();
  if (i >= pc.n) return;
  float x = logits[pc.logits_off + i];
  int label = labels[pc.labels_off + i];
  bool valid = label == 0 || label == 1;
  float y = float(label);
  if ((pc.flags & 1u) != 0u) {
    float g = 0.0;
    if (valid) {
      // sigmoid without overflow: exp of a non-positive argument only
      float e = exp(-abs(x));
      float sig = x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
      precise float diff = sig - y;
      g = pc.scale * diff;
    }
    dlogits[pc.dl_off + i] = g;
  }
  if ((pc.flags & 2u) != 0u) {
    precise float loss = max(x, 0.0) - x * y + dpt_log1p(exp(-abs(x)));
    part[pc.part_off + i] =
        floatBitsToUint(valid ? loss : (label == IGNORE_INDEX ? 0.0 : DPT_NAN));
    part[pc.part_off + pc.n + i] = (valid && ((x > 0.0) == (label == 1))) ? 1u : 0u;
  }
}
