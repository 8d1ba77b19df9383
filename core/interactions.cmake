# Interaction data for recommendation models: binary shards and their per-rank reader, Criteo's
# text layout, synthetic interactions with planted factors, and the metrics (AUC, logloss,
# recall@k). Needs zlib (shard CRC32s) from data.cmake.
list(APPEND DPT_SOURCES core/interactions.c core/interactions_criteo.c core/interactions_synth.c
     core/metrics.c)
