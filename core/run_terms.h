/* Internal: the terms of a run, compared across replicas at start-up (run_terms.c). */
#ifndef DPTRAIN_CORE_RUN_TERMS_H
#define DPTRAIN_CORE_RUN_TERMS_H

#include <stdint.h>

#include "dptrain/train.h"

/* Words per replica: one per field of the run's terms. */
#define DPT_RUN_TERM_COUNT 35

/* This replica's terms: words[DPT_RUN_TERM_COUNT] from the configuration and the data sets'
 * sizes and fingerprints. */
void dpt_run_terms(const dpt_train_config *cfg, uint64_t *words);

/* Compares every replica's terms (all[count][DPT_RUN_TERM_COUNT], in replica order) with
 * replica 0's: DPT_ERR_MISMATCH naming the first field that differs, replica 0's value and
 * every replica that has another. */
dpt_status dpt_run_terms_compare(const uint64_t *all, int count);

#endif
