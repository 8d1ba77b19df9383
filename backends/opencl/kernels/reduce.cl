/* Reductions, first stage: each work-group reduces a grid-strided share of the input to one
 * partial, written to partial[group]; the host adds the partials in double (second stage).
 *
 *   items:   0 1 2 .. G*L-1 | G*L ...        (G groups of L work-items, L a power of two)
 *   item i sums x[i], x[i + G*L], x[i + 2*G*L], ...  -> tree in local memory -> partial[g]
 *
 * Cost: n loads, G partials read back. */

/* Tree reduction of scratch[0 .. L) into scratch[0]; L = get_local_size(0), a power of two. */
#define DPT_TREE_REDUCE(scratch)                                                                   \
  do {                                                                                             \
    size_t lid_ = get_local_id(0);                                                                 \
    for (size_t s_ = get_local_size(0) / 2; s_ > 0; s_ /= 2) {                                     \
      if (lid_ < s_) scratch[lid_] += scratch[lid_ + s_];                                          \
      barrier(CLK_LOCAL_MEM_FENCE);                                                                \
    }                                                                                              \
  } while (0)

/* sum (square == 0) or sum of squares (square == 1) of x [n]. */
__kernel void reduce_sum(ulong n, int square, __global const float *x, ulong x_off,
                         __global acc_t *partial, __local acc_t *scratch) {
  acc_t acc = 0;
  for (size_t i = get_global_id(0); i < n; i += get_global_size(0)) {
    acc_t v = x[x_off + i];
    acc += square ? v * v : v;
  }
  scratch[get_local_id(0)] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  DPT_TREE_REDUCE(scratch);
  if (get_local_id(0) == 0) partial[get_group_id(0)] = scratch[0];
}

__kernel void count_nonfinite(ulong n, __global const float *x, ulong x_off,
                              __global ulong *partial, __local ulong *scratch) {
  ulong count = 0;
  for (size_t i = get_global_id(0); i < n; i += get_global_size(0))
    count += dpt_nonfinite(x[x_off + i]);
  scratch[get_local_id(0)] = count;
  barrier(CLK_LOCAL_MEM_FENCE);
  DPT_TREE_REDUCE(scratch);
  if (get_local_id(0) == 0) partial[get_group_id(0)] = scratch[0];
}

/* db [cols] = beta * db + column sums of dy [rows, cols]: one work-item per column walks down
 * the rows, so neighbouring work-items read neighbouring addresses. With beta == 0, db is not
 * read (NaN in db does not propagate). rows may be 0. */
__kernel void bias_grad(ulong cols, ulong rows, float beta, __global const float *dy,
                        ulong dy_off, __global float *db, ulong db_off) {
  size_t c = get_global_id(0);
  if (c >= cols) return;
  acc_t acc = 0;
  for (ulong r = 0; r < rows; ++r)
    acc += dy[dy_off + r * cols + c];
  acc_t old = beta == 0.0f ? 0 : (acc_t)beta * db[db_off + c];
  db[db_off + c] = (float)(old + acc);
}
