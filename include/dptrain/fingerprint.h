/* dptrain: the 64-bit fingerprint of byte ranges (drift checks, param_hash, data and vocabulary
 * fingerprints). */
#ifndef DPTRAIN_FINGERPRINT_H
#define DPTRAIN_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

#include "dptrain/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 64-bit fingerprint of a byte range, as used for replica drift checks (and the reports'
 * param_hash): four lanes of 64-bit little-endian words, multiply-rotate mixed, then folded and
 * avalanched; the same bytes give the same value on any host and at any alignment. Not a
 * cryptographic hash. */
DPT_API uint64_t dpt_fingerprint(const void *data, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
