# The trainer: replicas, the synchronized step with its gradient exchanges (buckets, sparse
# tables, the batch split), checkpoints, the terms of a run and its start-up agreement, the
# optimizers and the timeline.
list(APPEND DPT_SOURCES core/train/run.c core/train/setup.c core/train/step.c core/train/exchange.c core/train/exchange_kinds.c
     core/train/evaluate.c core/train/batch.c core/train/config.c core/train/replica.c core/train/train_buckets.c
     core/train/train_checkpoint.c core/train/train_sparse.c core/train/train_split.c
     core/train/run_terms.c core/train/optimizer.c core/train/trace.c
     core/train/train_runlog.c core/train/train_failure.c)
# Every core/train/exchange_<kind>.c: an exchange kind's file is built without a line here.
file(GLOB _dpt_exchange_files RELATIVE "${PROJECT_SOURCE_DIR}" CONFIGURE_DEPENDS
     "${CMAKE_CURRENT_LIST_DIR}/exchange_*.c")
list(SORT _dpt_exchange_files)
list(APPEND DPT_SOURCES ${_dpt_exchange_files})
