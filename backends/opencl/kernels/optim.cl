/* Optimizer updates (PyTorch semantics, see include/dptrain/backend.h), one work-item per
 * parameter. */

/* has_velocity == 0 when momentum == 0 and no velocity buffer is given (velocity is then a
 * dummy argument that is never touched). */
__kernel void sgd_update(ulong n, float lr, float momentum, float weight_decay, int nesterov,
                         int has_velocity, __global float *w, ulong w_off,
                         __global const float *grad, ulong grad_off, __global float *velocity,
                         ulong velocity_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  float wi = w[w_off + i];
  float g = grad[grad_off + i];
  /* Skipped when 0 (as PyTorch does): an infinite weight must not turn into NaN via 0 * inf. */
  if (weight_decay != 0.0f) g += weight_decay * wi;
  float step = g;
  if (has_velocity) {
    float v = momentum * velocity[velocity_off + i] + g;
    velocity[velocity_off + i] = v;
    step = nesterov ? g + momentum * v : v;
  }
  w[w_off + i] = wi - lr * step;
}

/* PyTorch's single-tensor order, like the CPU reference. The step-dependent scalars come from
 * the host, computed in double and rounded once: step_size = lr / (1 - beta1^step),
 * bc2_sqrt = sqrt(1 - beta2^step), decay = 1 - lr * weight_decay, omb1 = 1 - beta1,
 * omb2 = 1 - beta2. */
__kernel void adamw_update(ulong n, float beta1, float beta2, float eps, float step_size,
                           float bc2_sqrt, float decay, float omb1, float omb2, __global float *w,
                           ulong w_off, __global const float *grad, ulong grad_off,
                           __global float *m, ulong m_off, __global float *v, ulong v_off) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  float g = grad[grad_off + i];
  float wi = w[w_off + i] * decay;
  float mi = beta1 * m[m_off + i] + omb1 * g;
  float vi = beta2 * v[v_off + i] + omb2 * g * g;
  m[m_off + i] = mi;
  v[v_off + i] = vi;
  float denom = sqrt(vi) / bc2_sqrt + eps;
  w[w_off + i] = wi - step_size * (mi / denom);
}
