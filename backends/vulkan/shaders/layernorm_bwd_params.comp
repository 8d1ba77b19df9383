#version 450
#extension GL_GOOGLE_include_directive : require
// The parameter gradients of layer normalization, one invocation per column of x [rows, cols]
// over this dispatch's rows: dgamma = sum of dy * xhat, dbeta = sum of dy, in row order (no
// dependence on scheduling). first != 0 overwrites; otherwise the chunk's sums are added to
// the previous chunks' (the host splits the rows so the loop stays in lavapipe's budget).
layout(local_size_x = 256) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer DY { float dy[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) readonly buffer M { float mean[]; };
layout(std430, set = 0, binding = 3) readonly buffer R { float rstd[]; };
layout(std430, set = 0, binding = 4) buffer DG { float dgamma[]; };
layout(std430, set = 0, binding = 5) buffer DB { float dbeta[]; };
layout(push_constant) uniform P {
  uint rows, cols, dy_off, x_off, mean_off, rstd_off, dgamma_off, dbeta_off, first;
} pc;

void main() {
  uint c = dpt_gid();
  if (c >= pc.cols) return;
  float sg = 0.0, sb = 0.0;
  for (uint r = 0u; r < pc.rows; ++r) {
    float d = dy[pc.dy_off + r * pc.cols + c];
    precise float xhat = (x[pc.x_off + r * pc.cols + c] - mean[pc.mean_off + r]) *
                         rstd[pc.rstd_off + r];
    sg += d * xhat;
    sb += d;
  }
  if (pc.first == 0u) {
    sg += dgamma[pc.dgamma_off + c];
    sb += dbeta[pc.dbeta_off + c];
  }
  dgamma[pc.dgamma_off + c] = sg;
  dbeta[pc.dbeta_off + c] = sb;
}
