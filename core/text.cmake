# Text for masked-language-model pretraining: the byte-level BPE tokenizer (its vocabulary
# file is JSON, through jansson from data.cmake), corpora, sequences and masking.
list(APPEND DPT_SOURCES core/text_map.c core/bpe.c core/bpe_train.c core/bpe_json.c
     core/text_data.c core/dataset_text.c)
