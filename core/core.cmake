# The training core: models, optimizers (and the trainer, data readers in their fragments).
list(APPEND DPT_SOURCES core/model.c core/model_exec.c core/model_json.c core/optimizer.c core/model_io.c core/trainer.c core/train_checkpoint.c core/train_sparse.c core/train_buckets.c core/train_split.c core/fingerprint.c core/run_terms.c core/checkpoint.c core/trace.c
     core/agree.c)
