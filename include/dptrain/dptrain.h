/* dptrain: data-parallel training on any GPU. The umbrella header. */
#ifndef DPTRAIN_DPTRAIN_H
#define DPTRAIN_DPTRAIN_H

#include "dptrain/backend.h"
#include "dptrain/checkpoint.h"
#include "dptrain/comm.h"
#include "dptrain/data.h"
#include "dptrain/export.h"
#include "dptrain/fingerprint.h"
#include "dptrain/interactions.h"
#include "dptrain/metrics.h"
#include "dptrain/model.h"
#include "dptrain/optim.h"
#include "dptrain/optimizer.h"
#include "dptrain/safetensors.h"
#include "dptrain/sparse.h"
#include "dptrain/status.h"
#include "dptrain/text.h"
#include "dptrain/train.h"
#include "dptrain/version.h"

#endif
