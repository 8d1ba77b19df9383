/* Internal: the checks of a training configuration (config.c). */
#ifndef DPTRAIN_CORE_TRAIN_CONFIG_H
#define DPTRAIN_CORE_TRAIN_CONFIG_H

#include "core/train/replica.h"

/* DPT_OK when cfg describes a run this library can train (under MPI with comm, else with
 * cfg->devices.replicas threads); else DPT_ERR_INVALID_ARG naming the setting. */
dpt_status dpt_train_check_config(const dpt_train_config *cfg, dpt_comm *comm);

/* The caller's configuration (its first in->size bytes, a size this library knows) as this
 * library's, the fields past that size at their defaults; DPT_ERR_INVALID_ARG otherwise. */
dpt_status dpt_train_config_import(const dpt_train_config *in, dpt_train_config *out);

#endif
