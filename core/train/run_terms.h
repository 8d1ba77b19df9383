/* Internal: the terms of a run, compared across replicas at start-up (run_terms.c). */
#ifndef DPTRAIN_CORE_RUN_TERMS_H
#define DPTRAIN_CORE_RUN_TERMS_H

#include <stdint.h>

#include "dptrain/train.h"

/* Words per replica: one per field of the run's terms. */
#define DPT_RUN_TERM_COUNT 46

/* This replica's terms: words[DPT_RUN_TERM_COUNT] from the configuration and the data sets'
 * sizes and fingerprints. */
void dpt_run_terms(const dpt_train_config *cfg, uint64_t *words);

/* Compares every replica's terms (all[count][DPT_RUN_TERM_COUNT], in replica order) with
 * replica 0's: DPT_ERR_MISMATCH naming the first field that differs, replica 0's value and
 * every replica that has another. */
dpt_status dpt_run_terms_compare(const uint64_t *all, int count);

/* The terms as a JSON object (malloc'd) for checkpoints: each field under its name in lower
 * case ("global_batch"), integers and floats as numbers (doubles round-trip), fingerprints as
 * 16 hex digits. */
dpt_status dpt_run_terms_to_json(const uint64_t *words, char **out);

typedef void (*dpt_run_terms_log_fn)(const char *line, void *user);
/* A resume's check of the terms a checkpoint saved (JSON as above; origin names the file)
 * against this run's: DPT_ERR_MISMATCH naming the first field that differs with both values,
 * except the fields a resumed run may change (the learning rate, epochs, step limit and cosine
 * length, checks, non-finite policy, test set), which are reported through log (may be NULL). */
dpt_status dpt_run_terms_check_resume(const char *saved_json, const char *origin,
                                      const uint64_t *now, dpt_run_terms_log_fn log, void *user);

/* The tables' learning rate at the schedule's start: table_lr, or the table optimizer's default;
 * 0 without sparse_tables. */
double dpt_train_table_lr(const dpt_train_config *cfg);
/* deterministic: samples per group (group_size, or its default from the global batch). */
size_t dpt_train_group_size(const dpt_train_config *cfg);

#endif
