# Data preparation, outside the library: interaction shards written (the writer, Criteo's text
# converted, synthetic interactions) and BPE vocabularies learned and saved. A static library
# that the dptrain command, the benchmarks and the tests link.
add_library(dptrain_prep STATIC
            ${CMAKE_CURRENT_LIST_DIR}/shard_writer.c ${CMAKE_CURRENT_LIST_DIR}/criteo.c ${CMAKE_CURRENT_LIST_DIR}/npy.c
            ${CMAKE_CURRENT_LIST_DIR}/synth.c ${CMAKE_CURRENT_LIST_DIR}/bpe_train.c
            ${CMAKE_CURRENT_LIST_DIR}/bpe_save.c)
target_include_directories(dptrain_prep PUBLIC "${PROJECT_SOURCE_DIR}")
target_compile_options(dptrain_prep PRIVATE ${DPT_WARNINGS})
target_link_libraries(dptrain_prep PUBLIC dptrain_static PRIVATE ZLIB::ZLIB m)
include(${CMAKE_CURRENT_LIST_DIR}/images/images.cmake)
