# Files of the training core: safetensors and checkpoint files, BERT in the Hugging Face layout.
# Needs zlib (CRC32s, gzip IDX for core/data/) and jansson (JSON: safetensors headers, model
# files, vocabularies, config.json).
find_package(ZLIB REQUIRED)
pkg_check_modules(DPT_JANSSON REQUIRED IMPORTED_TARGET jansson)
list(APPEND DPT_SOURCES core/io/safetensors.c core/io/checkpoint.c core/io/hf_bert.c)
list(APPEND DPT_PRIVATE_LIBS ZLIB::ZLIB PkgConfig::DPT_JANSSON)
list(APPEND DPT_PKG_REQUIRES_PRIVATE zlib jansson)
