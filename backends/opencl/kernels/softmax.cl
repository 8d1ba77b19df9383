/* Softmax cross-entropy, forward and backward: one work-group per row.
 *
 *   pass 1: max and first argmax of the row   (strided over the group, tree in local memory)
 *   pass 2: sum of exp(x - max)               (likewise)
 *   pass 3: dlogits = scale * (p - onehot)    (when want_grad)
 *   stats[2r] = loss_r, stats[2r+1] = 1 if correct else 0   (when want_stats; the host adds
 *   them in double)
 * A label equal to DPT_IGNORE_INDEX (-100): loss 0 (adds nothing), gradient row zero, never
 * correct; any other label outside [0, cols): loss NaN, gradient row zero, never correct.
 * Exponentials and sums are computed in acc_t (double where the device has it, like the CPU
 * reference).
 * Cost: 2 reads of the row (3 with the gradient), one write of the row. */

/* Does candidate (v2, i2) beat (v1, i1) for the first maximal element? i == cols: none. */
inline int dpt_better(float v1, ulong i1, float v2, ulong i2, ulong cols) {
  if (i2 == cols) return 0;
  if (i1 == cols) return 1;
  return v2 > v1 || (v2 == v1 && i2 < i1);
}

__kernel void softmax_xent(ulong cols, __global const float *logits, ulong logits_off,
                           __global const int *labels, ulong labels_off, float scale,
                           int want_grad, __global float *dlogits, ulong dlogits_off,
                           int want_stats, __global acc_t *stats, __local float *lval,
                           __local ulong *lidx, __local acc_t *lsum) {
  size_t r = get_group_id(0), lid = get_local_id(0), nl = get_local_size(0);
  __global const float *x = logits + logits_off + r * cols;

  float best = 0.0f;
  ulong bi = cols;
  for (ulong j = lid; j < cols; j += nl) {
    float v = x[j];
    if (bi == cols || v > best) {
      best = v;
      bi = j;
    }
  }
  lval[lid] = best;
  lidx[lid] = bi;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (size_t s = nl / 2; s > 0; s /= 2) {
    if (lid < s && dpt_better(lval[lid], lidx[lid], lval[lid + s], lidx[lid + s], cols)) {
      lval[lid] = lval[lid + s];
      lidx[lid] = lidx[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float mx = lval[0];
  ulong amax = lidx[0];

  acc_t acc = 0;
  for (ulong j = lid; j < cols; j += nl)
    acc += exp((acc_t)x[j] - mx);
  lsum[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (size_t s = nl / 2; s > 0; s /= 2) {
    if (lid < s) lsum[lid] += lsum[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  acc_t sum = lsum[0];

  int label = labels[labels_off + r];
  int valid = label >= 0 && (ulong)label < cols;
  int ignored = label == DPT_IGNORE_INDEX;
  if (want_grad) {
    __global float *d = dlogits + dlogits_off + r * cols;
    for (ulong j = lid; j < cols; j += nl) {
      float g = 0.0f;
      if (valid) {
        acc_t p = exp((acc_t)x[j] - mx) / sum;
        g = (float)((acc_t)scale * (p - (j == (ulong)label ? 1 : 0)));
      }
      d[j] = g;
    }
  }
  if (want_stats && lid == 0) {
    stats[2 * r] = valid ? log(sum) - ((acc_t)x[label] - mx) : ignored ? (acc_t)0 : (acc_t)NAN;
    stats[2 * r + 1] = valid && amax == (ulong)label ? 1 : 0;
  }
}

/* ---- attention's softmax and the softmax's backward: one work-group per row ----------------
 * Each work-item walks the columns lid, lid + L, ... of its row in every pass and writes only
 * those, so the output may be the input (in place). Sums in acc_t; lred: local size acc_t. */

/* The group's maximum (op 0) or sum (op 1) of v, in every work-item. */
inline acc_t dpt_group_reduce(acc_t v, int op, __local acc_t *lred) {
  size_t lid = get_local_id(0), nl = get_local_size(0);
  lred[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (size_t s = nl / 2; s > 0; s /= 2) {
    if (lid < s) lred[lid] = op ? lred[lid] + lred[lid + s] : fmax(lred[lid], lred[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  acc_t r = lred[0];
  barrier(CLK_LOCAL_MEM_FENCE); /* lred is reused by the next reduction */
  return r;
}

/* probs[r] = softmax(scale * scores[r]) over the keys not masked; row r = (h * n + i) * q + j
 * (group id), key t of sample i = (r / q) % n masked when has_ids and ids[i * k + t] == pad_id.
 * Masked keys and rows of masked keys only give 0. */
__kernel void attn_softmax(ulong n, ulong q, ulong k, float scale, int has_ids, int pad_id,
                           __global const int *ids, ulong ids_off, __global const float *scores,
                           ulong scores_off, __global float *probs, ulong probs_off,
                           __local acc_t *lred) {
  ulong r = get_group_id(0), lid = get_local_id(0), nl = get_local_size(0);
  __global const float *x = scores + scores_off + r * k;
  __global float *y = probs + probs_off + r * k;
  __global const int *key = ids + ids_off + ((r / q) % n) * k;

  acc_t mx = -INFINITY;
  for (ulong t = lid; t < k; t += nl)
    if (!has_ids || key[t] != pad_id) mx = fmax(mx, (acc_t)scale * (acc_t)x[t]);
  mx = dpt_group_reduce(mx, 0, lred);

  acc_t sum = 0;
  for (ulong t = lid; t < k; t += nl)
    if (!has_ids || key[t] != pad_id) sum += exp((acc_t)scale * (acc_t)x[t] - mx);
  sum = dpt_group_reduce(sum, 1, lred);

  acc_t inv = sum > 0 ? 1 / sum : 0;
  for (ulong t = lid; t < k; t += nl) {
    acc_t e = (!has_ids || key[t] != pad_id) ? exp((acc_t)scale * (acc_t)x[t] - mx) : 0;
    y[t] = (float)(e * inv);
  }
}

/* dx[r] = y[r] * (dy[r] - sum_c y[r, c] * dy[r, c]) over rows of cols (group id = row); dx may
 * be dy. */
__kernel void softmax_bwd(ulong cols, __global const float *y, ulong y_off,
                          __global const float *dy, ulong dy_off, __global float *dx, ulong dx_off,
                          __local acc_t *lred) {
  ulong r = get_group_id(0), lid = get_local_id(0), nl = get_local_size(0);
  __global const float *yr = y + y_off + r * cols, *dyr = dy + dy_off + r * cols;
  __global float *dxr = dx + dx_off + r * cols;
  acc_t dot = 0;
  for (ulong c = lid; c < cols; c += nl)
    dot += (acc_t)yr[c] * (acc_t)dyr[c];
  dot = dpt_group_reduce(dot, 1, lred);
  for (ulong c = lid; c < cols; c += nl)
    dxr[c] = (float)((acc_t)yr[c] * ((acc_t)dyr[c] - dot));
}

/* ---- binary cross-entropy with logits: one work-item per logit ------------------------------
 * loss = max(x, 0) - x * y + log1p(exp(-|x|)), dlogits = scale * (sigmoid(x) - y) for a label
 * y in {0, 1}; DPT_IGNORE_INDEX: loss 0, gradient 0, never correct; any other label: loss NaN,
 * gradient 0, never correct. stats[2i] = loss_i, stats[2i+1] = 1 if (x > 0) == y (the host adds
 * them in double, like softmax_xent's rows). In acc_t, as the CPU reference in double. dlogits
 * may be logits: each work-item reads its logit before writing it. */
__kernel void bce_logits(ulong n, __global const float *logits, ulong logits_off,
                         __global const int *labels, ulong labels_off, float scale, int want_grad,
                         __global float *dlogits, ulong dlogits_off, int want_stats,
                         __global acc_t *stats) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  acc_t v = logits[logits_off + i];
  int y = labels[labels_off + i];
  int valid = y == 0 || y == 1;
  if (want_grad)
    dlogits[dlogits_off + i] =
        valid ? (float)((acc_t)scale * ((acc_t)1 / ((acc_t)1 + exp(-v)) - (acc_t)y)) : 0.0f;
  if (want_stats) {
    stats[2 * i] = valid ? fmax(v, (acc_t)0) - v * (acc_t)y + log1p(exp(-fabs(v)))
                 : y == DPT_IGNORE_INDEX ? (acc_t)0
                                         : (acc_t)NAN;
    stats[2 * i + 1] = valid && ((v > 0) == (y == 1)) ? 1 : 0;
  }
}
