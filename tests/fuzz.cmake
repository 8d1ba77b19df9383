# The parser fuzz targets (tests/fuzz/, docs/fuzzing.md). Every build replays each target's
# corpus (tests/fuzz/corpus/<target>/) through it: ctest fuzz_replay_<target>. With DPT_FUZZ=ON
# (clang) each is also a libFuzzer binary fuzz_<target>, and ctest fuzz_<target> (label
# `fuzzer`) fuzzes it for DPT_FUZZ_SECONDS from the corpus (with the dictionary
# tests/fuzz/dict/<target>.dict of its format's tokens), new inputs kept in the build tree.
set(DPT_FUZZ_TARGETS safetensors checkpoint idx model_json bpe_json interactions criteo)
set(DPT_FUZZ_SECONDS 20 CACHE STRING "Seconds each ctest fuzz_<target> run fuzzes")
set(_dpt_fuzz_src ${CMAKE_CURRENT_LIST_DIR}/fuzz)
foreach(_t IN LISTS DPT_FUZZ_TARGETS)
  set(_sources fuzz/fuzz_${_t}.c fuzz/fuzz_common.c)
  dpt_add_check_test(NAME fuzz_replay_${_t} SOURCES fuzz/replay.c ${_sources}
                     ARGS ${_dpt_fuzz_src}/corpus/${_t} LIBS dptrain_prep
                     LABELS unit fuzz TIMEOUT 120)
  if(DPT_FUZZ)
    add_executable(fuzz_${_t} ${_sources})
    target_link_libraries(fuzz_${_t} PRIVATE dptrain_prep dptrain_static Threads::Threads m)
    target_include_directories(fuzz_${_t} PRIVATE ${PROJECT_SOURCE_DIR})
    target_link_options(fuzz_${_t} PRIVATE -fsanitize=fuzzer)
    list(APPEND _dpt_fuzz_bins fuzz_${_t})
    set(_work ${CMAKE_CURRENT_BINARY_DIR}/fuzz-work/${_t})
    file(MAKE_DIRECTORY ${_work}/corpus ${_work}/crashes)
    set(_dict "")
    if(EXISTS ${_dpt_fuzz_src}/dict/${_t}.dict)
      set(_dict -dict=${_dpt_fuzz_src}/dict/${_t}.dict)
    endif()
    # -timeout: one input may take 10 s; -rss_limit_mb: a parser that believes a size field
    # and allocates gigabytes is a finding, not an out-of-memory kill.
    add_test(NAME fuzz_${_t}
             COMMAND $<TARGET_FILE:fuzz_${_t}> -max_total_time=${DPT_FUZZ_SECONDS} -timeout=10
                     -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 ${_dict}
                     -artifact_prefix=${_work}/crashes/ ${_work}/corpus ${_dpt_fuzz_src}/corpus/${_t})
    math(EXPR _deadline "${DPT_FUZZ_SECONDS} + 120")
    set_tests_properties(fuzz_${_t} PROPERTIES LABELS fuzzer TIMEOUT ${_deadline})
  endif()
endforeach()
if(DPT_FUZZ)
  add_custom_target(dpt_fuzz_targets DEPENDS ${_dpt_fuzz_bins})
endif()
