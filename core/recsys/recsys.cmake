# Recommendation data: binary interaction shards and their per-rank reader, and the metrics (AUC,
# logloss, recall@k). Shards are written by tools/prep/.
list(APPEND DPT_SOURCES core/recsys/interactions.c core/recsys/metrics.c)
