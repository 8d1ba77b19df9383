# Text for masked-language-model pretraining: the byte-level BPE tokenizer (its vocabulary file
# is JSON, through jansson from core/io/), corpora, sequences and masking.
list(APPEND DPT_SOURCES core/text/text_map.c core/text/bpe.c core/text/bpe_train.c
     core/text/bpe_json.c core/text/text_corpus.c core/text/text_dataset.c)
