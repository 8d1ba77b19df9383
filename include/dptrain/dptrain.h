/* dptrain: data-parallel training on any GPU. The umbrella header. */
#ifndef DPTRAIN_DPTRAIN_H
#define DPTRAIN_DPTRAIN_H

#include "dptrain/backend.h"
#include "dptrain/export.h"
#include "dptrain/status.h"
#include "dptrain/version.h"

#endif
