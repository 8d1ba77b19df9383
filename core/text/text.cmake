# Text for masked-language-model pretraining: the byte-level BPE tokenizer and its vocabulary file
# read (JSON, through jansson from core/io/), BERT's WordPiece tokenizer (Unicode through
# utf8proc), corpora (JSON lines too), sequences and masking. Vocabularies are learned and saved
# by tools/prep/.
pkg_check_modules(DPT_UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
list(APPEND DPT_SOURCES core/text/bpe.c core/text/bpe_json.c core/text/text_corpus.c
     core/text/text_jsonl.c core/text/tokenizer.c core/text/wordpiece.c core/text/text_dataset.c)
list(APPEND DPT_PRIVATE_LIBS PkgConfig::DPT_UTF8PROC)
list(APPEND DPT_PKG_REQUIRES_PRIVATE libutf8proc)
