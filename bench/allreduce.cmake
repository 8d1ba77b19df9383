# bench_allreduce (also `dptrain bench allreduce`): dptrain's all-reduce next to MPI_Allreduce.
# Included by bench/CMakeLists.txt, so the list variables below are that file's.
list(APPEND DPT_BENCH_SOURCES "${CMAKE_CURRENT_LIST_DIR}/allreduce.c")
if(DPT_WITH_MPI)
  list(APPEND DPT_BENCH_DEFS DPT_HAVE_MPI)
  list(APPEND DPT_BENCH_LIBS MPI::MPI_C)
endif()
add_executable(bench_allreduce "${CMAKE_CURRENT_LIST_DIR}/allreduce_main.c")
target_compile_options(bench_allreduce PRIVATE ${DPT_WARNINGS})
target_link_libraries(bench_allreduce PRIVATE dptrain_bench)
