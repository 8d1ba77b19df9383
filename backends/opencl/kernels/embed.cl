/* Embedding lookup and its gradient. */

/* out [n, dim] = table [vocab, dim] rows picked by idx [n]; an index outside [0, vocab) gives a
 * row of NaN. One work-item per output element (total = n * dim). */
__kernel void embed_gather(ulong total, ulong vocab, ulong dim, __global const float *table,
                           ulong table_off, __global const int *idx, ulong idx_off,
                           __global float *out, ulong out_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong row = g / dim, j = g % dim;
  int k = idx[idx_off + row];
  out[out_off + g] = k >= 0 && (ulong)k < vocab ? table[table_off + (ulong)k * dim + j] : NAN;
}

/* dtable [vocab, dim] += dout [n, dim] rows scattered to idx [n]; repeated indices add up,
 * indices outside [0, vocab) are ignored. OpenCL 1.2 has no float atomics, so writers never
 * share an address instead:
 *
 *   work-item (b, j), b < buckets, j < dim:  owns column j of every row k with k % buckets == b
 *   it walks i = 0 .. n-1 and adds dout[i, j] to dtable[idx[i], j] when idx[i] is one of its rows
 *
 * Each dtable element is written by one work-item, adding its terms in increasing i like the
 * CPU reference. Cost: buckets * dim * n index reads (the host bounds buckets), n * dim
 * read-modify-writes. Global size = buckets * dim; neighbouring work-items take neighbouring
 * columns. */
__kernel void embed_scatter_add(ulong n, ulong vocab, ulong dim, ulong buckets,
                                __global const float *dout, ulong dout_off,
                                __global const int *idx, ulong idx_off, __global float *dtable,
                                ulong dtable_off) {
  size_t g = get_global_id(0);
  if (g >= buckets * dim) return;
  ulong j = g % dim, b = g / dim;
  for (ulong i = 0; i < n; ++i) {
    int k = idx[idx_off + i];
    if (k < 0 || (ulong)k >= vocab || (ulong)k % buckets != b) continue;
    dtable[dtable_off + (ulong)k * dim + j] += dout[dout_off + i * dim + j];
  }
}
