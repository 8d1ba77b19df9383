/* Uses the installed dptrain: y = 2*x + y on the CPU backend, checks the values. */
#include <stdio.h>

#include <dptrain/dptrain.h>

int main(void) {
  const float x[3] = {1, 2, 3};
  float y[3] = {10, 20, 30};
  dpt_backend *be = NULL;
  dpt_buffer *bx = NULL, *by = NULL;
  dpt_status st = dpt_backend_create(DPT_BACKEND_CPU, 0, &be);
  if (st == DPT_OK) st = dpt_buffer_alloc(be, sizeof x, &bx);
  if (st == DPT_OK) st = dpt_buffer_alloc(be, sizeof y, &by);
  if (st == DPT_OK) st = dpt_buffer_upload(bx, 0, x, sizeof x);
  if (st == DPT_OK) st = dpt_buffer_upload(by, 0, y, sizeof y);
  if (st == DPT_OK) st = dpt_axpy(be, 3, 2.0f, bx, 0, by, 0);
  if (st == DPT_OK) st = dpt_buffer_download(by, 0, y, sizeof y);
  dpt_backend_destroy(be);
  if (st != DPT_OK) {
    fprintf(stderr, "consumer: %s: %s\n", dpt_status_str(st), dpt_last_error());
    return 1;
  }
  if (y[0] != 12 || y[1] != 24 || y[2] != 36) {
    fprintf(stderr, "consumer: wrong result %g %g %g\n", y[0], y[1], y[2]);
    return 1;
  }
  printf("dptrain %s: ok\n", dpt_version());
  return 0;
}
