# Text for MLM pretraining: the BPE tokenizer, its vocabulary file, corpora, sequences, masking.
dpt_add_check_test(NAME test_text SOURCES core/text/test_text.c LIBS dptrain_prep LABELS unit data text
                   TIMEOUT 120)
# dptrain tokenize: the report, the vocabulary file, bad input.
if(DPT_BUILD_TOOLS)
  add_test(NAME text_cli COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/text_cli_test.sh"
                                 $<TARGET_FILE:dptrain_cli> "${CMAKE_CURRENT_BINARY_DIR}/text-cli-scratch")
  set_tests_properties(text_cli PROPERTIES TIMEOUT 120 LABELS "cli;text")
endif()
# dptrain train --model bert and dptrain eval on its weights: metrics, vocabulary, bad input.
if(DPT_BUILD_TOOLS)
  add_test(NAME bert_cli COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/bert_cli_test.sh"
                                 $<TARGET_FILE:dptrain_cli> "${CMAKE_CURRENT_BINARY_DIR}/bert-cli-scratch")
  set_tests_properties(bert_cli PROPERTIES TIMEOUT 300 LABELS "cli;text")
endif()
# BERT's WordPiece tokenizer against the documented rules; sequences and masking with its ids.
dpt_add_check_test(NAME test_wordpiece SOURCES core/text/test_wordpiece.c LABELS unit text
                   TIMEOUT 60)
# BERT in the Hugging Face layout: export, --init-weights DIR round trip, logits against
# tools/hf_bert_reference.py (skipped, 77, without python3-torch).
if(DPT_BUILD_TOOLS)
  add_test(NAME hf_bert
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/hf_bert_test.sh"
                   $<TARGET_FILE:dptrain_cli> "${PROJECT_SOURCE_DIR}/tools/hf_bert_reference.py"
                   "${CMAKE_CURRENT_BINARY_DIR}/hf-bert-scratch")
  set_tests_properties(hf_bert PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli;text;pytorch")
endif()
# BERT in the Hugging Face layout at the library: save -> load -> save bit for bit, token types
# folded, old LayerNorm names, refusals.
dpt_add_check_test(NAME test_hf_bert SOURCES core/io/test_hf_bert.c LABELS unit text TIMEOUT 60)
# WordPiece against tokenization.py's rules written out in Python, on 150 random strings.
if(DPT_BUILD_TOOLS)
  add_test(NAME wordpiece_rules
           COMMAND /usr/bin/python3 "${CMAKE_CURRENT_SOURCE_DIR}/scripts/wordpiece_rules_test.py"
                   $<TARGET_FILE:dptrain_cli> "${CMAKE_CURRENT_BINARY_DIR}/wordpiece-rules-scratch")
  set_tests_properties(wordpiece_rules PROPERTIES TIMEOUT 120 LABELS "cli;text")
endif()
