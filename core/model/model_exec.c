/* Forward and backward through the layer graph: the walk over the layers, each run by its kind's
 * table (core/model/layer.h; the kinds' op sequences are in core/model/layers/), and the loss.
 *
 * Layers run in spec order forward and in reverse backward (the order puts every layer after
 * its inputs). A layer's output gradient (dout) may have several contributions, one per layer
 * that takes it as input: the first overwrites it, each later one is written to the scratch
 * buffer and added (dpt_layer_grad_target, dpt_layer_add_gradient in core/model/layer_util.c). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/model/layer.h"
#include "core/model/layer_util.h"
#include "core/model/model_impl.h"

/* ---- forward ------------------------------------------------------------------------------- */

static dpt_status forward_layer(dpt_model *m, const dpt_node *L, const dpt_buffer *x, size_t b) {
  if (L->absorbed) return DPT_OK; /* its input's layer ran it */
  const dpt_buffer *in = dpt_model_out_of(m, L->src[0], x);
  const dpt_layer_ops *ops = dpt_layer_ops_of(L->spec.kind);
  return ops->forward ? ops->forward(m, L, in, x, b) : DPT_OK; /* flatten: an alias */
}

dpt_status dpt_model_forward(dpt_model *m, const dpt_buffer *x, size_t b) {
  m->col_layer = NULL; /* new inputs: columns of an earlier forward are stale */
  for (size_t i = 0; i < m->num_layers; ++i) {
    DPT_TRY(forward_layer(m, &m->layers[i], x, b));
    if (m->hook) m->hook(m->hook_ctx, i, 0, m->num_params);
  }
  return DPT_OK;
}

/* ---- backward ------------------------------------------------------------------------------ */

/* Layer L's backward by its kind's table: a kind routing its own input gradients, or one input
 * whose gradient goes where grad_target says (flatten: nothing). */
static dpt_status backward_layer(dpt_model *m, const dpt_node *L, const dpt_buffer *x, size_t b) {
  const dpt_layer_ops *ops = dpt_layer_ops_of(L->spec.kind);
  if (L->absorbed) return DPT_OK; /* its dout is its input's layer's */
  if (ops->backward_all) return ops->backward_all(m, L, x, b);
  if (!ops->backward) return DPT_OK;
  int add = 0;
  dpt_buffer *din = dpt_layer_grad_target(m, L, 0, &add);
  DPT_TRY(ops->backward(m, L, dpt_model_out_of(m, L->src[0], x), din, b));
  return add ? dpt_layer_add_gradient(m, L, 0, b) : DPT_OK;
}

/* Walks the layers in reverse; each reads its dout (complete: every layer taking its output
 * came later and has run) and writes its parameters' gradients and its inputs' gradients. */
dpt_status dpt_model_backward(dpt_model *m, const dpt_buffer *x, size_t b) {
  memset(m->grad_written, 0, m->num_layers);
  memset(m->w_written, 0, m->num_tensors);
  m->grad_written[m->num_layers - 1] = 1; /* the loss gradient */
  for (size_t i = m->num_layers; i-- > 0;) {
    DPT_TRY(backward_layer(m, &m->layers[i], x, b));
    if (m->hook) m->hook(m->hook_ctx, i, 1, m->ready_from[i]);
  }
  return DPT_OK;
}

/* ---- entry points -------------------------------------------------------------------------- */

static dpt_status check_batch(const dpt_model *m, const char *fn, const dpt_buffer *x,
                              const dpt_buffer *labels, size_t b) {
  if (!m) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: model is NULL", fn);
  if (!x || !labels) return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: x/labels is NULL", fn);
  if (b == 0 || b > m->max_batch)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: batch %zu not in 1..%zu", fn, b, m->max_batch);
  if (dpt_buffer_size(x) < b * dpt_model_input_size(m) * sizeof(float))
    return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: x holds %zu bytes, batch needs %zu", fn,
                         dpt_buffer_size(x), b * dpt_model_input_size(m) * sizeof(float));
  return DPT_OK;
}

static const dpt_node *last_layer(const dpt_model *m) {
  return &m->layers[m->num_layers - 1]; /* never a flatten (checked in plan) */
}

/* The loss's rows for b samples: one per sample, or per position of a token model. */
static size_t loss_rows(const dpt_model *m, size_t b) {
  return b * dpt_model_labels_per_sample(m);
}

/* The loss over the logits: softmax cross-entropy over the classes, or with one class binary
 * cross-entropy with logits (labels 0 or 1). */
static dpt_status loss(dpt_model *m, size_t b, const dpt_node *last, const dpt_buffer *labels,
                       float scale, dpt_buffer *dlogits, double *loss_sum, int64_t *correct) {
  if (m->spec.num_classes == 1)
    return dpt_bce_logits(m->be, loss_rows(m, b), last->out, 0, labels, 0, scale, dlogits, 0,
                          loss_sum, correct);
  return dpt_softmax_xent(m->be, loss_rows(m, b), m->spec.num_classes, last->out, 0, labels, 0,
                          scale, dlogits, 0, loss_sum, correct);
}

dpt_status dpt_model_train_step(dpt_model *m, const dpt_buffer *x, const dpt_buffer *labels,
                                size_t b, float grad_scale, double *loss_sum, int64_t *correct) {
  DPT_TRY(check_batch(m, "dpt_model_train_step", x, labels, b));
  m->training = 1;
  DPT_TRY(dpt_model_forward(m, x, b));
  const dpt_node *last = last_layer(m);
  DPT_TRY(loss(m, b, last, labels, grad_scale, last->dout, loss_sum, correct));
  return dpt_model_backward(m, x, b);
}

dpt_status dpt_model_evaluate(dpt_model *m, const dpt_buffer *x, const dpt_buffer *labels, size_t b,
                              double *loss_sum, int64_t *correct) {
  DPT_TRY(check_batch(m, "dpt_model_evaluate", x, labels, b));
  m->training = 0;
  DPT_TRY(dpt_model_forward(m, x, b));
  return loss(m, b, last_layer(m), labels, 1.0f, NULL, loss_sum, correct);
}

dpt_status dpt_model_logits(dpt_model *m, const dpt_buffer *x, size_t b, float *logits) {
  DPT_TRY(check_batch(m, "dpt_model_logits", x, x, b));
  if (!logits) return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_logits: logits is NULL");
  m->training = 0;
  DPT_TRY(dpt_model_forward(m, x, b));
  return dpt_buffer_download(last_layer(m)->out, 0, logits,
                             loss_rows(m, b) * m->spec.num_classes * sizeof(float));
}

/* Host samples through dpt_model_logits, in pieces of at most max_batch through one buffer. */
dpt_status dpt_model_predict(dpt_model *m, const float *x, size_t b, float *logits) {
  if (!m || !x || !logits || b == 0)
    return dpt_set_error(DPT_ERR_INVALID_ARG, "dpt_model_predict: %s",
                         !m        ? "model is NULL"
                         : !x      ? "x is NULL"
                         : !logits ? "logits is NULL"
                                   : "batch is 0");
  const size_t in = dpt_model_input_size(m), piece = b < m->max_batch ? b : m->max_batch;
  dpt_buffer *dx = NULL;
  DPT_TRY(dpt_buffer_alloc(m->be, piece * in * sizeof(float), &dx));
  dpt_status st = DPT_OK;
  for (size_t at = 0; st == DPT_OK && at < b; at += piece) {
    const size_t n = b - at < piece ? b - at : piece;
    st = dpt_buffer_upload(dx, 0, x + at * in, n * in * sizeof(float));
    if (st == DPT_OK)
      st = dpt_model_logits(m, dx, n, logits + loss_rows(m, at) * m->spec.num_classes);
  }
  dpt_buffer_free(dx);
  return st;
}
