/* The finite-difference gradient check of whole models, shared by tests/core/model/test_model.c and
 * tests/core/train/test_dlrm.c. Header-only, as test_util.h. */
#ifndef DPT_TESTS_GRAD_CHECK_H
#define DPT_TESTS_GRAD_CHECK_H

#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "dptrain/model.h"
#include "test_util.h"

/* The training-mode loss (batch statistics, the step's dropout mask) at parameters w. */
static inline double gc_train_loss(dpt_model *m, const float *w, dpt_buffer *bx, dpt_buffer *by,
                                   size_t b) {
  double loss = 0;
  TU_OK(dpt_model_set_params(m, w));
  TU_OK(dpt_model_train_step(m, bx, by, b, 1.0f, &loss, NULL));
  return loss;
}

/* Every tensor's backprop gradient at `probes` places against central finite differences (in
 * double of the float loss) of the loss over the batch in bx/by. A probe where two step sizes
 * disagree straddles a kink (relu, a max) and says nothing: it is skipped; more than
 * min_checked probes, and 4 in 5, must be usable. */
static inline void gc_check_gradients(dpt_model *m, dpt_buffer *bx, dpt_buffer *by, size_t b,
                                      size_t probes, int min_checked) {
  size_t np = dpt_model_num_params(m);
  float *g = malloc(np * sizeof(float)), *w = malloc(np * sizeof(float));
  TU_OK(dpt_model_get_params(m, w));
  gc_train_loss(m, w, bx, by, b);
  TU_OK(dpt_buffer_download(dpt_model_grads(m), 0, g, np * sizeof(float)));
  int checked = 0, tried = 0;
  for (size_t t = 0; t < dpt_model_num_tensors(m); ++t) {
    dpt_tensor_info ti;
    TU_OK(dpt_model_tensor(m, t, &ti));
    for (size_t j = 0; j < ti.count; j += ti.count / probes + 1) {
      size_t p = ti.offset + j;
      double fd[2];
      const float eps[2] = {1e-3f, 5e-4f};
      for (int e = 0; e < 2; ++e) {
        float keep = w[p];
        w[p] = keep + eps[e];
        double lp = gc_train_loss(m, w, bx, by, b);
        w[p] = keep - eps[e];
        double lm = gc_train_loss(m, w, bx, by, b);
        w[p] = keep;
        fd[e] = (lp - lm) / (2.0 * (double)eps[e]);
      }
      ++tried;
      if (fabs(fd[0] - fd[1]) > 1e-3 + 1e-2 * fabs(fd[0])) continue;
      ck_assert_msg(fabs(fd[0] - (double)g[p]) <= 2e-3 + 3e-2 * fabs(fd[0]),
                    "%s[%zu]: backprop %g, finite difference %g", ti.name, j, (double)g[p], fd[0]);
      ++checked;
    }
  }
  ck_assert_int_gt(checked, min_checked);
  ck_assert_int_ge(checked * 5, tried * 4);
  free(g);
  free(w);
}

#endif
