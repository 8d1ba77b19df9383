# Data input/output: IDX datasets, the sampler and batch split, safetensors.
dpt_add_check_test(NAME test_data SOURCES core/data/test_data.c LIBS ZLIB::ZLIB LABELS unit data TIMEOUT 60)
dpt_add_check_test(NAME test_sampler SOURCES core/data/test_sampler.c LABELS unit data TIMEOUT 300)
dpt_add_check_test(NAME test_safetensors SOURCES core/io/test_safetensors.c LABELS unit data TIMEOUT 60)
