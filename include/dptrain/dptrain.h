/* dptrain: data-parallel training on any GPU. The training tier: everything an application needs
 * to train, evaluate and save a model, and nothing of the machinery below it.
 *
 * Intended usage
 * --------------
 *   1. Build or load a model: fill a dpt_model_spec, with a builder (dpt_model_spec_mlp, _cnn,
 *      _resnet, _bert, _dlrm), layer by layer (dpt_model_spec_init, dpt_model_spec_add), from a
 *      model file (dpt_model_spec_load_json) or from a weights file (dpt_model_spec_from_weights).
 *   2. Load data: dpt_dataset_load_dir / _load_idx / _load_safetensors / _from_memory (a copy)
 *      / _wrap (the caller's samples in place); text for masked-language models
 *      (dpt_text_corpus_load, dpt_bpe_load, dpt_text_sequences_build, dpt_dataset_from_text);
 *      per-rank recommendation shards (dpt_interactions_open).
 *   3. Configure: dpt_train_config_default(&cfg), then fill its groups: cfg.model (the spec),
 *      cfg.data (training and test sets), cfg.optim (dpt_optim_config), cfg.schedule (batch,
 *      epochs, seed), cfg.devices (backend kind, replicas; dpt_backend_compiled,
 *      dpt_device_count), cfg.exchange, cfg.checkpoints, cfg.checks, cfg.callbacks.
 *   4. Train: dpt_train(&cfg, comm, &final) with comm NULL (cfg.devices.replicas replicas as
 * threads of this process) or an MPI communicator (dpt_comm_create_mpi: one replica per rank);
 *      reports arrive through cfg.callbacks.on_report, and the run resumes from its checkpoints
 *      (dpt_checkpoint_find_latest, dpt_checkpoint_verify, dpt_checkpoint_export).
 *   5. Evaluate: the reports' test loss and accuracy (AUC and logloss on shards); any model with
 *      dpt_model_predict on host samples and the metrics (dpt_auc, dpt_logloss,
 *      dpt_recall_at_k, and their _comm forms over ranks).
 *   6. Save and load: cfg.final_params into a model (dpt_backend_create, dpt_model_create,
 *      dpt_model_set_state), then dpt_model_save / dpt_model_load (safetensors that PyTorch
 *      reads).
 * Every fallible call returns a dpt_status; dpt_status_str names it and dpt_last_error gives
 * the calling thread's detailed message.
 *
 * The split
 * ---------
 * This header includes the training tier: status.h, version.h, export.h; device.h (backend
 * kinds, devices, creating a backend); communicator.h (creating an MPI or threads communicator,
 * its rank and size); model.h (specs, builders, model files, create, host-side state, weights
 * files, predict); data.h, text.h, interactions.h (data sets, text, shard readers); optim.h
 * (optimizer settings and schedules); train.h (dpt_train, its configuration, reports and
 * callbacks); checkpoint.h (the checkpoints dpt_train writes: verify, find, export);
 * metrics.h (AUC, logloss, recall@k).
 *
 * The advanced tier is dptrain/advanced.h: device memory and the op set (backend.h),
 * collectives (comm.h), the model's device buffers and hooks (model_device.h), the optimizer
 * object (optimizer.h), the sparse exchange (sparse.h), safetensors files (safetensors.h) and
 * the fingerprint (fingerprint.h). Every header may also be included on its own.
 */
#ifndef DPTRAIN_DPTRAIN_H
#define DPTRAIN_DPTRAIN_H

#include "dptrain/checkpoint.h"
#include "dptrain/communicator.h"
#include "dptrain/data.h"
#include "dptrain/device.h"
#include "dptrain/export.h"
#include "dptrain/interactions.h"
#include "dptrain/metrics.h"
#include "dptrain/model.h"
#include "dptrain/optim.h"
#include "dptrain/status.h"
#include "dptrain/text.h"
#include "dptrain/train.h"
#include "dptrain/version.h"

#endif
