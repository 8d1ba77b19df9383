# Recommendation data: binary interaction shards and their per-rank reader, Criteo's text layout,
# synthetic interactions with planted factors, and the metrics (AUC, logloss, recall@k).
list(APPEND DPT_SOURCES core/recsys/interactions.c core/recsys/interactions_criteo.c
     core/recsys/interactions_synth.c core/recsys/metrics.c)
