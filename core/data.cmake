# Data input/output for the training core: the dataset object and its IDX reader, the sampler
# and batch split, safetensors, the deterministic generator. Needs zlib (gzip-compressed IDX)
# and jansson (JSON: model files and safetensors headers).
find_package(ZLIB REQUIRED)
pkg_check_modules(DPT_JANSSON REQUIRED IMPORTED_TARGET jansson)
list(APPEND DPT_SOURCES core/rng.c core/dataset.c core/dataset_st.c core/idx.c core/sampler.c core/safetensors.c)
list(APPEND DPT_PRIVATE_LIBS ZLIB::ZLIB PkgConfig::DPT_JANSSON)
list(APPEND DPT_PKG_REQUIRES_PRIVATE zlib jansson)
