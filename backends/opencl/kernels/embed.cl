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

/* ---- embedding bags (the recommendation model) ---------------------------------------------
 * Sample i's bag: the `bag` ids idx[i * stride + s], s < bag; an id < 0 is an empty slot.
 * The mean divides by the slots holding an id >= 0 (bad ids included, as the CPU reference). */

/* The multiplier of sample i's terms: 1, or for the mean 1 / its ids (the caller found one). */
inline float dpt_bag_scale(__global const int *ids, ulong bag, int mean) {
  if (!mean) return 1.0f;
  uint cnt = 0;
  for (ulong s = 0; s < bag; ++s)
    cnt += ids[s] >= 0;
  return 1.0f / (float)cnt;
}

/* out [n, dim]: the sum (or mean) of table rows over sample i's ids, added slot by slot in
 * order like the CPU reference; an id >= vocab makes the row NaN. One work-item per output
 * element (total = n * dim). */
__kernel void embed_bag(ulong total, ulong bag, ulong vocab, ulong dim, ulong stride, int mean,
                        __global const float *table, ulong table_off, __global const int *idx,
                        ulong idx_off, __global float *out, ulong out_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong i = g / dim, d = g % dim;
  __global const int *ids = idx + idx_off + i * stride;
  float acc = 0.0f;
  uint cnt = 0;
  for (ulong s = 0; s < bag; ++s) {
    int t = ids[s];
    if (t < 0) continue;
    if ((ulong)t >= vocab) {
      out[out_off + g] = NAN;
      return;
    }
    ++cnt;
    acc += table[table_off + (ulong)t * dim + d];
  }
  if (mean && cnt > 0) acc *= 1.0f / (float)cnt;
  out[out_off + g] = acc;
}

/* dtable [vocab, dim] += each sample's dout row (times its mean's 1 / count) at each of its ids
 * in [0, vocab). Deterministic and race-free without atomics, as embed_scatter_add:
 *
 *   work-item (b, j), b < buckets, j < dim:  owns column j of every row k with k % buckets == b
 *   it walks i = 0 .. n-1 and, within sample i, s = 0 .. bag-1, adding to dtable[k, j]
 *
 * so every dtable element has one writer, which adds its terms in the CPU reference's order
 * (samples, then slots; a repeated id adds once per slot). Cost: buckets * dim * n * bag id
 * reads (the host bounds buckets). Global size = buckets * dim. */
__kernel void embed_bag_bwd(ulong n, ulong bag, ulong vocab, ulong dim, ulong stride, int mean,
                            ulong buckets, __global const float *dout, ulong dout_off,
                            __global const int *idx, ulong idx_off, __global float *dtable,
                            ulong dtable_off) {
  size_t g = get_global_id(0);
  if (g >= buckets * dim) return;
  ulong j = g % dim, b = g / dim;
  for (ulong i = 0; i < n; ++i) {
    __global const int *ids = idx + idx_off + i * stride;
    float term = 0.0f;
    int have = 0;
    for (ulong s = 0; s < bag; ++s) {
      int k = ids[s];
      if (k < 0 || (ulong)k >= vocab || (ulong)k % buckets != b) continue;
      if (!have) {
        term = dpt_bag_scale(ids, bag, mean) * dout[dout_off + i * dim + j];
        have = 1;
      }
      dtable[dtable_off + (ulong)k * dim + j] += term;
    }
  }
}

/* ---- column gathers between row-major matrices ---------------------------------------------
 * y[r * ldy + j] = x[r * ldx + map[j]] (0 for an entry outside [0, ldx)); scatter_cols_add adds
 * back: x[r * ldx + map[j]] += y[r * ldy + j], skipping entries outside [0, ldx). The in-range
 * entries are distinct (the API's contract), so each x element has at most one writer. One
 * work-item per (r, j) (total = rows * cols). */
__kernel void gather_cols(ulong total, ulong cols, ulong ldx, ulong ldy, __global const float *x,
                          ulong x_off, __global const int *map, ulong map_off, __global float *y,
                          ulong y_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong r = g / cols, j = g % cols;
  int c = map[map_off + j];
  y[y_off + r * ldy + j] = c >= 0 && (ulong)c < ldx ? x[x_off + r * ldx + (ulong)c] : 0.0f;
}

__kernel void scatter_cols_add(ulong total, ulong cols, ulong ldx, ulong ldy, __global float *x,
                               ulong x_off, __global const int *map, ulong map_off,
                               __global const float *y, ulong y_off) {
  size_t g = get_global_id(0);
  if (g >= total) return;
  ulong r = g / cols, j = g % cols;
  int c = map[map_off + j];
  if (c >= 0 && (ulong)c < ldx) x[x_off + r * ldx + (ulong)c] += y[y_off + r * ldy + j];
}
