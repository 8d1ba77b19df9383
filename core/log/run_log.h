/* Internal: a run's log directory: settings.json (the run's settings, written at the start),
 * steps.jsonl and evals.jsonl (one JSON object a line, flushed as written) and a TensorBoard
 * event file (core/log/tb_events.h) holding the same scalars. */
#ifndef DPTRAIN_CORE_LOG_RUN_LOG_H
#define DPTRAIN_CORE_LOG_RUN_LOG_H

#include <jansson.h>
#include <stdint.h>

#include "core/log/tb_events.h"
#include "dptrain/status.h"

typedef struct dpt_run_log dpt_run_log;

/* The record files of a log directory. */
typedef enum dpt_run_log_file { DPT_RUN_LOG_STEPS, DPT_RUN_LOG_EVALS } dpt_run_log_file;

/* Opens the log in dir, created (with its parents) when missing. append 0: a fresh log,
 * refused when dir holds one already (settings.json, steps.jsonl, evals.jsonl or an event
 * file: runs are never mixed); append 1 (a resumed run): steps.jsonl and evals.jsonl go on
 * where they are. settings is written to settings.json (replacing a resumed run's), and a new
 * event file events.out.tfevents.<seconds>.<host> is started. DPT_ERR_IO naming the path. */
dpt_status dpt_run_log_open(const char *dir, int append, const json_t *settings, dpt_run_log **out);
/* One record: line (a JSON object) appended to the file as one line, and the scalars as one
 * event at step (values that are not finite are left out of the event); both flushed. */
dpt_status dpt_run_log_write(dpt_run_log *log, dpt_run_log_file file, const json_t *line,
                             int64_t step, const dpt_tb_scalar *v, size_t n);
/* The event file's path. */
const char *dpt_run_log_events_path(const dpt_run_log *log);
/* NULL does nothing. */
void dpt_run_log_close(dpt_run_log *log);

#endif
