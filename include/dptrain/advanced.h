/* dptrain: the advanced tier, for programs that drive the machinery dpt_train is made of:
 * backends, device memory and the op set (backend.h); collectives on a communicator, the
 * start-up agreement, nonblocking requests (comm.h); a model's device buffers, hooks and
 * device-batch steps (model_device.h); the optimizer object (optimizer.h); the sparse
 * exchange of embedding rows (sparse.h); safetensors files (safetensors.h); BERT in the
 * Hugging Face layout (hf.h); the 64-bit fingerprint (fingerprint.h). It includes the training tier
 * (dptrain.h) as well.
 */
#ifndef DPTRAIN_ADVANCED_H
#define DPTRAIN_ADVANCED_H

#include "dptrain/backend.h"
#include "dptrain/comm.h"
#include "dptrain/dptrain.h"
#include "dptrain/fingerprint.h"
#include "dptrain/hf.h"
#include "dptrain/model_device.h"
#include "dptrain/optimizer.h"
#include "dptrain/safetensors.h"
#include "dptrain/sparse.h"

#endif
