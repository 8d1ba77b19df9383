/* Helpers every layer family shares (core/model/layer_util.h): planning's messages and tensor
 * lists, device memory, gradient routing, dropout's generator and parameter initialization. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "base/size.h"
#include "core/model/layer_util.h"

/* Planning runs inside dpt_model_create; its messages carry that name and the layer. */
static const char plan_fn[] = "dpt_model_create";

/* "layer 3 (conv2d)" or "layer 3 'conv1' (conv2d)", for messages. */
static const char *label(const dpt_model *m, size_t i, char *buf, size_t cap) {
  const dpt_layer_spec *l = &m->spec.layers[i];
  const char *kind = dpt_layer_kind_name(l->kind);
  if (l->name[0])
    snprintf(buf, cap, "layer %zu '%s' (%s)", i, l->name, kind ? kind : "?");
  else
    snprintf(buf, cap, "layer %zu (%s)", i, kind ? kind : "?");
  return buf;
}

/* DPT_ERR_INVALID_ARG "dpt_model_create: <label>: <message>". */
dpt_status dpt_layer_error(const dpt_model *m, size_t i, const char *fmt, ...) {
  char lb[96], msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dpt_set_error(DPT_ERR_INVALID_ARG, "%s: %s %s", plan_fn, label(m, i, lb, sizeof lb), msg);
}

/* Appends tensor "<prefix>.<what>" of shape[ndim] to a list (parameters or buffers), at the end
 * of its flat buffer (*total floats so far); *index_out receives its index. */
dpt_status dpt_layer_add_tensor(dpt_model *m, size_t i, int buffer, const char *what, int ndim,
                                const int64_t *shape, size_t *index_out) {
  size_t *count = buffer ? &m->num_buffers : &m->num_tensors;
  size_t *total = buffer ? &m->num_buffer_floats : &m->num_params;
  dpt_tensor_info *t = buffer ? &m->buffers[*count] : &m->tensors[*count];
  char *name = m->names[(buffer ? 4 * m->num_layers : 0) + *count];
  const dpt_layer_spec *l = &m->spec.layers[i];
  if (l->name[0])
    snprintf(name, DPT_LAYER_NAME_MAX + 24, "%s.%s", l->name, what);
  else
    snprintf(name, DPT_LAYER_NAME_MAX + 24, "%zu.%s", i, what);
  t->name = name;
  t->ndim = ndim;
  t->count = 1;
  for (int d = 0; d < ndim; ++d) {
    t->shape[d] = shape[d];
    if (!dpt_mul_ok(t->count, (size_t)shape[d], &t->count))
      return LAYER_ERR(m, i, "tensor %s is too large", t->name);
  }
  t->offset = *total;
  if (!dpt_add_ok(*total, t->count, total)) return LAYER_ERR(m, i, "too many parameters");
  if (index_out) *index_out = *count;
  ++*count;
  return DPT_OK;
}

/* "weight" of shape w_shape[ndim] and, unless no_bias, "bias" [w_shape[0]]. */
dpt_status dpt_layer_add_weight_and_bias(dpt_model *m, size_t i, int ndim, const int64_t *w_shape) {
  dpt_node *L = &m->layers[i];
  DPT_TRY(dpt_layer_add_tensor(m, i, 0, "weight", ndim, w_shape, &L->w_index));
  if (L->spec.no_bias) return DPT_OK;
  return dpt_layer_add_tensor(m, i, 0, "bias", 1, w_shape, &L->b_index);
}

dpt_status dpt_layer_need_seq(const dpt_model *m, size_t i, const dpt_sample_shape *x) {
  if (!x->seq)
    return LAYER_ERR(m, i, "needs a sequence input (after an embedding), not %zu x %zu x %zu", x->c,
                     x->h, x->w);
  return DPT_OK;
}

dpt_status dpt_layer_need_image(const dpt_model *m, size_t i, const dpt_sample_shape *x) {
  if (x->flat) return LAYER_ERR(m, i, "needs an image input, not a flattened one");
  if (x->seq) return LAYER_ERR(m, i, "needs an image input, not a sequence");
  return DPT_OK;
}

/* The shape of layer i's input j (the model input for DPT_LAYER_INPUT_MODEL). */
dpt_sample_shape dpt_layer_input_shape(const dpt_model *m, size_t i, int j) {
  int a = m->layers[i].src[j];
  return a == DPT_LAYER_INPUT_MODEL
             ? (dpt_sample_shape){m->spec.in_c, m->spec.in_h, m->spec.in_w, 0, 0}
             : m->layers[a].oshape;
}

dpt_sample_shape dpt_layer_vector_shape(size_t n) {
  return (dpt_sample_shape){n, 1, 1, 1, 0};
}

/* The models of records: no token ids. */
dpt_status dpt_layer_need_records(const dpt_model *m, size_t i) {
  if (m->spec.seq_len) return LAYER_ERR(m, i, "cannot be part of a token model (seq_len > 0)");
  return DPT_OK;
}

dpt_status dpt_layer_alloc_floats(dpt_model *m, size_t count, size_t elem, dpt_buffer **out) {
  size_t bytes;
  if (!dpt_mul_ok(count, elem, &bytes))
    return dpt_set_error(DPT_ERR_OUT_OF_MEMORY, "dpt_model_create: buffer size overflows");
  if (bytes == 0) bytes = elem;
  DPT_TRY(dpt_buffer_alloc(m->be, bytes, out));
  m->activation_bytes += bytes;
  return DPT_OK;
}

/* An int32 device buffer holding host[n] (not activation memory: a constant of the model). */
dpt_status dpt_layer_upload_i32(dpt_model *m, const int32_t *host, size_t n, dpt_buffer **out) {
  DPT_TRY(dpt_buffer_alloc(m->be, (n ? n : 1) * sizeof(int32_t), out));
  return n ? dpt_buffer_upload(*out, 0, host, n * sizeof(int32_t)) : DPT_OK;
}

const dpt_buffer *dpt_model_out_of(const dpt_model *m, int i, const dpt_buffer *x) {
  if (i < 0) return x;
  int s = m->layers[i].store;
  return s < 0 ? x : m->layers[s].out;
}

/* Where layer L's input j gradient goes: the input's dout when it is the first contribution,
 * else the scratch buffer (*add set: the caller adds it with dpt_layer_add_gradient). NULL when the
 * input is the model input, which needs no gradient. */
int dpt_layer_store_of(const dpt_model *m, int src) {
  return src < 0 ? -1 : m->layers[src].store;
}

dpt_buffer *dpt_layer_grad_target(dpt_model *m, const dpt_node *L, int j, int *add) {
  int s = dpt_layer_store_of(m, L->src[j]);
  *add = 0;
  if (s < 0) return NULL;
  if (!m->grad_written[s]) {
    m->grad_written[s] = 1;
    return m->layers[s].dout;
  }
  *add = 1;
  return m->scratch;
}

/* The first use of a weight this step overwrites its gradient, a later one adds (a weight
 * shared by a tied linear and its embedding): the beta of that use's gemm. */
float dpt_layer_weight_beta(dpt_model *m, size_t w) {
  float beta = m->w_written[w] ? 1.0f : 0.0f;
  m->w_written[w] = 1;
  return beta;
}

dpt_status dpt_layer_add_gradient(dpt_model *m, const dpt_node *L, int j, size_t b) {
  const dpt_node *S = &m->layers[m->layers[L->src[j]].store];
  return dpt_axpy(m->be, b * S->out_size, 1.0f, m->scratch, 0, S->dout, 0);
}

/* The layer's index is mixed into the seed, so two dropout layers draw different masks. */
dpt_dropout_params dpt_layer_dropout_params(const dpt_model *m, const dpt_node *L) {
  uint64_t layer = (uint64_t)(L - m->layers) + 1;
  dpt_dropout_params p = {L->spec.p, m->seed ^ (layer * 0x9e3779b97f4a7c15ULL), m->step,
                          m->first_sample};
  return p;
}

/* Tensor t uniform in +-bound, or normal(0, sd) when sd > 0, from its own generator stream. */
void dpt_layer_init_tensor(const dpt_model *m, size_t t, uint64_t seed, double bound, double sd,
                           float *host) {
  const dpt_tensor_info *ti = &m->tensors[t];
  dpt_rng rng;
  dpt_rng_seed(&rng, seed, (uint64_t)t);
  for (size_t j = 0; j < ti->count; ++j)
    host[ti->offset + j] =
        (float)(sd > 0.0 ? sd * dpt_rng_normal(&rng) : (2.0 * dpt_rng_uniform(&rng) - 1.0) * bound);
}

void dpt_layer_zero_tensor(const dpt_model *m, size_t t, float *host) {
  if (t != SIZE_MAX) memset(host + m->tensors[t].offset, 0, m->tensors[t].count * sizeof(float));
}

/* The weight kaiming_uniform_(a=sqrt(5)), bound 1/sqrt(fan_in), and the bias uniform in the same
 * bound (PyTorch's linear and conv2d); with init_std > 0 the weight normal(0, init_std) and the
 * bias 0. A tied linear initializes its bias only. */
void dpt_layer_init_weight_bias(const dpt_model *m, const dpt_node *L, uint64_t seed, float *host) {
  const double sd = L->spec.init_std;
  const dpt_tensor_info *wt = &m->tensors[L->w_index];
  double bound = 1.0 / sqrt((double)(wt->count / (size_t)wt->shape[0]));
  if (!L->spec.tie) dpt_layer_init_tensor(m, L->w_index, seed, bound, sd, host);
  if (L->b_index == SIZE_MAX) return;
  if (sd > 0.0)
    dpt_layer_zero_tensor(m, L->b_index, host);
  else
    dpt_layer_init_tensor(m, L->b_index, seed, bound, 0.0, host);
}
