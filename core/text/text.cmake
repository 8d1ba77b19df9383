# Text for masked-language-model pretraining: the byte-level BPE tokenizer and its vocabulary file
# read (JSON, through jansson from core/io/), corpora, sequences and masking. Vocabularies are
# learned and saved by tools/prep/.
list(APPEND DPT_SOURCES core/text/bpe.c core/text/bpe_json.c core/text/text_corpus.c
     core/text/text_dataset.c)
