# Interaction data for recommendation models: shards, ranks, the epoch, Criteo text, synthetic
# data, and the metrics (AUC, logloss, recall@k; gathered over thread ranks).
dpt_add_check_test(NAME test_interactions SOURCES core/recsys/test_interactions.c LIBS dptrain_prep LABELS unit data
                   TIMEOUT 120)
# dptrain data convert|synth|debian|info as a user meets them: one-line errors with file:line,
# round trips, determinism, the planted AUC, a hand-written Debian package list.
if(DPT_BUILD_TOOLS)
  add_test(NAME interactions_cli
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/interactions_cli_test.sh"
                   $<TARGET_FILE:dptrain_cli> "${CMAKE_CURRENT_BINARY_DIR}/interactions-cli-scratch")
  set_tests_properties(interactions_cli PROPERTIES TIMEOUT 120 LABELS "cli;data")
endif()
