/* dptrain: version. */
#ifndef DPTRAIN_VERSION_H
#define DPTRAIN_VERSION_H

#include "dptrain/export.h"

#define DPT_VERSION_MAJOR 0
#define DPT_VERSION_MINOR 1
#define DPT_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0": the version of the library actually linked (may differ from the header's). */
DPT_API const char *dpt_version(void);

#ifdef __cplusplus
}
#endif

#endif
