/* The embedding tables: embedding (token ids to a sequence), position_embedding (a row added at
 * each position) and embedding_bag (a record's ids, summed or averaged); plans, initialization,
 * forward and backward. */
#include "base/error.h"
#include "core/model/layer.h"
#include "core/model/layer_util.h"

/* normal(0, 1) (nn.Embedding's and nn.EmbeddingBag's), or normal(0, init_std). */
static void embedding_init(const dpt_model *m, const dpt_node *L, uint64_t seed, float *host) {
  const double sd = L->spec.init_std;
  dpt_layer_init_tensor(m, L->w_index, seed, 0.0, sd > 0.0 ? sd : 1.0, host);
}

/* embedding: the model's token ids to a sequence [S, size]; table [vocab, size]. */
static dpt_status plan_embedding(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  if (!m->spec.seq_len || L->src[0] != DPT_LAYER_INPUT_MODEL)
    return LAYER_ERR(m, i, "must take the model input of a token model (seq_len > 0)");
  if (L->spec.size == 0 || L->spec.vocab == 0)
    return LAYER_ERR(m, i, "has size %zu and vocab %zu; neither may be 0", L->spec.size,
                     L->spec.vocab);
  if (L->spec.vocab > INT32_MAX) return LAYER_ERR(m, i, "has more than 2^31 - 1 rows");
  const int64_t ws[2] = {(int64_t)L->spec.vocab, (int64_t)L->spec.size};
  DPT_TRY(dpt_layer_add_tensor(m, i, 0, "weight", 2, ws, &L->w_index));
  *x = (dpt_sample_shape){1, m->spec.seq_len, L->spec.size, 0, 1};
  return DPT_OK;
}

static dpt_status embedding_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *x,
                                    size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  return dpt_embed_gather(m->be, b * L->oshape.h, (size_t)W->shape[0], (size_t)W->shape[1],
                          m->params, W->offset, x, 0, L->out, 0);
}

static dpt_status embedding_fwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                const dpt_buffer *x, size_t b) {
  (void)in;
  return embedding_forward(m, L, x, b);
}

static dpt_status embedding_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *x,
                                     size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  if (dpt_layer_weight_beta(m, L->w_index) == 0.0f)
    DPT_TRY(dpt_buffer_fill_f32(m->grads, W->offset, W->count, 0.0f));
  return dpt_embed_scatter_add(m->be, b * L->oshape.h, (size_t)W->shape[0], (size_t)W->shape[1],
                               L->dout, 0, x, 0, m->grads, W->offset);
}

const dpt_layer_ops dpt_layer_ops_EMBEDDING = {
    .flags = DPT_LAYER_TAKES_TOKENS,
    .plan = plan_embedding,
    .init = embedding_init,
    .forward = embedding_fwd,
    .backward_all = embedding_backward,
};

/* position_embedding: adds rows 0..S-1 of a table [vocab, F]. */
static dpt_status plan_position(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  DPT_TRY(dpt_layer_need_seq(m, i, x));
  if (L->spec.vocab < x->h)
    return LAYER_ERR(m, i, "has %zu positions, the sequence has %zu", L->spec.vocab, x->h);
  const int64_t ws[2] = {(int64_t)L->spec.vocab, (int64_t)x->w};
  return dpt_layer_add_tensor(m, i, 0, "weight", 2, ws, &L->w_index);
}

/* y = x + table[0:S] at every sample (a bias over the sample's S x F values). */
static dpt_status position_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                   size_t b) {
  DPT_TRY(dpt_buffer_copy(L->out, 0, in, 0, b * L->out_size * sizeof(float)));
  return dpt_bias_add(m->be, b, L->out_size, L->out, 0, m->params, m->tensors[L->w_index].offset);
}

static dpt_status position_fwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                               const dpt_buffer *x, size_t b) {
  (void)x;
  return position_forward(m, L, in, b);
}

static dpt_status position_backward(dpt_model *m, const dpt_node *L, dpt_buffer *din, size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  DPT_TRY(dpt_bias_grad(m->be, b, L->out_size, L->dout, 0, 0.0f, m->grads, W->offset));
  if (W->count > L->out_size) /* the positions beyond the sequence get no gradient */
    DPT_TRY(dpt_buffer_fill_f32(m->grads, W->offset + L->out_size, W->count - L->out_size, 0.0f));
  if (!din) return DPT_OK;
  return dpt_buffer_copy(din, 0, L->dout, 0, b * L->out_size * sizeof(float));
}

static dpt_status position_bwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                               dpt_buffer *din, size_t b) {
  (void)in;
  return position_backward(m, L, din, b);
}

const dpt_layer_ops dpt_layer_ops_POSITION_EMBEDDING = {
    .plan = plan_position,
    .init = embedding_init,
    .forward = position_fwd,
    .backward = position_bwd,
};

/* embedding_bag: the record's ids [offset, offset + bag) into a table [vocab, size]. */
static dpt_status plan_embedding_bag(dpt_model *m, size_t i, dpt_sample_shape *x) {
  dpt_node *L = &m->layers[i];
  DPT_TRY(dpt_layer_need_records(m, i));
  if (L->src[0] != DPT_LAYER_INPUT_MODEL)
    return LAYER_ERR(m, i, "must take the model input (the record holding its ids), not layer %d",
                     L->src[0]);
  if (L->spec.size == 0 || L->spec.vocab == 0)
    return LAYER_ERR(m, i, "has size %zu and vocab %zu; neither may be 0", L->spec.size,
                     L->spec.vocab);
  if (L->spec.vocab > INT32_MAX) return LAYER_ERR(m, i, "has more than 2^31 - 1 rows");
  if (L->spec.bag == 0) L->spec.bag = 1;
  if (L->spec.mode != DPT_BAG_SUM && L->spec.mode != DPT_BAG_MEAN)
    return LAYER_ERR(m, i, "has mode %d, not 0 (sum) or 1 (mean)", L->spec.mode);
  if (L->spec.offset > L->in_size || L->spec.bag > L->in_size - L->spec.offset)
    return LAYER_ERR(m, i, "reads id slots [%zu, %zu + %zu) beyond the record's %zu",
                     L->spec.offset, L->spec.offset, L->spec.bag, L->in_size);
  const int64_t ws[2] = {(int64_t)L->spec.vocab, (int64_t)L->spec.size};
  DPT_TRY(dpt_layer_add_tensor(m, i, 0, "weight", 2, ws, &L->w_index));
  *x = dpt_layer_vector_shape(L->spec.size);
  return DPT_OK;
}

/* embedding_bag: the ids at int32 slot `offset` of each record (the model input x, a record
 * every in_size slots). */
static dpt_status embedding_bag_forward(dpt_model *m, const dpt_node *L, const dpt_buffer *x,
                                        size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  return dpt_embed_bag(m->be, b, L->spec.bag, (size_t)W->shape[0], (size_t)W->shape[1],
                       (dpt_bag_mode)L->spec.mode, m->params, W->offset, x, L->spec.offset,
                       L->in_size, L->out, 0);
}

static dpt_status embedding_bag_fwd(dpt_model *m, const dpt_node *L, const dpt_buffer *in,
                                    const dpt_buffer *x, size_t b) {
  (void)in;
  return embedding_bag_forward(m, L, x, b);
}

static dpt_status embedding_bag_backward(dpt_model *m, const dpt_node *L, const dpt_buffer *x,
                                         size_t b) {
  const dpt_tensor_info *W = &m->tensors[L->w_index];
  if (!m->sparse_table_grads) DPT_TRY(dpt_buffer_fill_f32(m->grads, W->offset, W->count, 0.0f));
  return dpt_embed_bag_bwd(m->be, b, L->spec.bag, (size_t)W->shape[0], (size_t)W->shape[1],
                           (dpt_bag_mode)L->spec.mode, L->dout, 0, x, L->spec.offset, L->in_size,
                           m->grads, W->offset);
}

const dpt_layer_ops dpt_layer_ops_EMBEDDING_BAG = {
    .flags = DPT_LAYER_SPARSE_ROWS,
    .plan = plan_embedding_bag,
    .init = embedding_init,
    .forward = embedding_bag_fwd,
    .backward_all = embedding_bag_backward,
};
