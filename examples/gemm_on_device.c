/* Multiply two small matrices on the first device of a backend and print the result.
 * Usage: example_gemm_on_device [cpu|opencl|vulkan] */
#include <stdio.h>

#include <dptrain/advanced.h>

#define CHECK(call)                                                                                \
  do {                                                                                             \
    dpt_status st_ = (call);                                                                       \
    if (st_ != DPT_OK) {                                                                           \
      fprintf(stderr, "%s failed: %s: %s\n", #call, dpt_status_str(st_), dpt_last_error());        \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

int main(int argc, char **argv) {
  dpt_backend_kind kind = DPT_BACKEND_CPU;
  if (argc > 1) CHECK(dpt_backend_kind_parse(argv[1], &kind));

  dpt_backend *be;
  CHECK(dpt_backend_create(kind, 0, &be));
  dpt_device_info info;
  CHECK(dpt_backend_get_info(be, &info));
  printf("device: %s (%s)\n", info.name, info.driver);

  const float a[2 * 3] = {1, 2, 3, 4, 5, 6}; /* [2,3] */
  const float b[3 * 2] = {1, 0, 0, 1, 1, 1}; /* [3,2] */
  float c[2 * 2];                            /* [2,2] = a * b */
  dpt_buffer *da, *db, *dc;
  CHECK(dpt_buffer_alloc(be, sizeof a, &da));
  CHECK(dpt_buffer_alloc(be, sizeof b, &db));
  CHECK(dpt_buffer_alloc(be, sizeof c, &dc));
  CHECK(dpt_buffer_upload(da, 0, a, sizeof a));
  CHECK(dpt_buffer_upload(db, 0, b, sizeof b));
  CHECK(dpt_gemm(be, 0, 0, 2, 2, 3, 1.0f, da, 0, 3, db, 0, 2, 0.0f, dc, 0, 2));
  CHECK(dpt_buffer_download(dc, 0, c, sizeof c));
  printf("[[%g, %g], [%g, %g]]\n", c[0], c[1], c[2], c[3]); /* [[4, 5], [10, 11]] */

  dpt_backend_destroy(be); /* frees the buffers too */
  return 0;
}
