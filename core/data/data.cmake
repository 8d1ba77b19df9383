# Data sets: the dataset object, its IDX (plain or gzip) and safetensors readers, the sampler and
# batch split.
list(APPEND DPT_SOURCES core/data/dataset.c core/data/dataset_st.c core/data/idx.c
     core/data/sampler.c)
