/* dptrain: BERT in the Hugging Face layout: a directory of config.json (BertConfig) and
 * model.safetensors with transformers' BertForMaskedLM tensor names, written from dptrain's
 * BERT (dpt_model_spec_bert) and read back into it. docs/hf.md maps every tensor.
 *
 *   bert.embeddings.word_embeddings.weight      embed.tok.weight
 *   bert.embeddings.position_embeddings.weight  embed.pos.weight
 *   bert.embeddings.token_type_embeddings.weight  zeros [2, hidden] (read: row 0 is added to
 *                                               every position row, exact for one segment)
 *   bert.embeddings.LayerNorm.{weight,bias}     embed.norm
 *   bert.encoder.layer.N.attention.self.{query,key,value}.{weight,bias}
 *                                               blocks.N.attn.in_proj_{weight,bias} rows
 *                                               [0, H), [H, 2H), [2H, 3H)
 *   ...attention.output.dense                   blocks.N.attn.out_proj
 *   ...attention.output.LayerNorm               blocks.N.norm1
 *   ...intermediate.dense                       blocks.N.ffn1
 *   ...output.dense, ...output.LayerNorm        blocks.N.ffn2, blocks.N.norm2
 *   cls.predictions.transform.dense             mlm.dense
 *   cls.predictions.transform.LayerNorm         mlm.norm
 *   cls.predictions.bias                        mlm.decoder.bias
 *   cls.predictions.decoder.weight              embed.tok.weight (tied; written, and read only
 *                                               to check it equals the word embeddings)
 */
#ifndef DPTRAIN_HF_H
#define DPTRAIN_HF_H

#include <stddef.h>

#include "dptrain/model.h"
#include "dptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_HF_CONFIG  "config.json"
#define DPT_HF_WEIGHTS "model.safetensors"

/* The options a spec was built with when it is dptrain's BERT (dpt_model_spec_bert with them
 * gives the same layers); DPT_ERR_INVALID_ARG saying what differs otherwise. */
DPT_API dpt_status dpt_bert_options_from_spec(const dpt_model_spec *spec, dpt_bert_options *o);

/* Writes dir/config.json and dir/model.safetensors (dir is created when missing) from host, the
 * state ([dpt_model_state_size] floats) of `model`, dptrain's BERT with options o. Each file is
 * written through a temporary and renamed. DPT_ERR_IO naming the path, DPT_ERR_INVALID_ARG. */
DPT_API dpt_status dpt_hf_bert_save(const dpt_model *model, const dpt_bert_options *o,
                                    const float *host, const char *dir);

/* Reads dir/config.json into o's sizes (vocab, hidden, layers, heads, ffn, max_positions,
 * ln_eps; the rest is left as it was). DPT_ERR_BAD_FORMAT naming the file and the key when it
 * is not a BERT dptrain can hold (model_type not "bert", hidden_act not "gelu", a position
 * embedding other than "absolute", a size missing). */
DPT_API dpt_status dpt_hf_bert_read_config(const char *dir, dpt_bert_options *o);

/* Reads dir (config.json checked against o, then model.safetensors: every tensor above with its
 * shape, F32, F16 or BF16; LayerNorm's gamma and beta accepted for weight and bias; other
 * tensors, such as the pooler's, ignored) into host, the state of `model` built from o. The
 * token-type row 0 is added to the position embeddings. DPT_ERR_BAD_FORMAT naming the file and
 * the tensor or key. */
DPT_API dpt_status dpt_hf_bert_load(const dpt_model *model, const dpt_bert_options *o,
                                    const char *dir, float *host);

#ifdef __cplusplus
}
#endif

#endif
