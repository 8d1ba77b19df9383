# CPU backend: always built. OpenBLAS gemm when DPT_WITH_OPENBLAS, oneDNN convolution when
# DPT_WITH_ONEDNN.
list(APPEND DPT_SOURCES backends/cpu/cpu_backend.c backends/cpu/cpu_gemm.c backends/cpu/cpu_ops.c
     backends/cpu/cpu_layers.c backends/cpu/cpu_bn.c backends/cpu/cpu_openblas.c
     backends/cpu/cpu_conv.c backends/cpu/cpu_fused.c
     backends/half.c)
if(DPT_WITH_ONEDNN)
  # oneDNN's OpenMP runtime: the backend sets its thread count (omp_set_num_threads)
  find_package(OpenMP REQUIRED COMPONENTS C)
  list(APPEND DPT_PRIVATE_LIBS ${DPT_DNNL_LIBRARY} ${OpenMP_C_LIBRARIES})
  list(APPEND DPT_PRIVATE_DEFS DPT_HAVE_ONEDNN)
  list(APPEND DPT_PKG_LIBS_PRIVATE -ldnnl -lgomp)
  list(APPEND DPT_PRIVATE_INCLUDES ${DPT_DNNL_INCLUDE})
endif()
if(DPT_WITH_OPENBLAS)
  list(APPEND DPT_PRIVATE_LIBS PkgConfig::DPT_OPENBLAS)
  list(APPEND DPT_PRIVATE_DEFS DPT_HAVE_OPENBLAS)
  list(APPEND DPT_PKG_REQUIRES_PRIVATE openblas)
endif()
# The portable gemm's micro-kernels are written as acc += a * b on vectors: let the compiler
# fuse that into FMA where the kernel's target has it (ISO C mode turns contraction off). The
# file's other code is packing and bookkeeping, unaffected. No -march: one binary for every
# x86-64, the AVX2 kernel is picked at run time.
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  set_property(SOURCE backends/cpu/cpu_gemm.c APPEND PROPERTY COMPILE_OPTIONS -ffp-contract=fast)
endif()
# The element-wise ops are plain loops written to vectorize (no branches inside, selects
# instead): -O3 lets the compiler do it (and unswitch the loops). It changes no result: ISO C
# mode keeps contraction off, and sums are never reassociated without -ffast-math.
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  set_property(SOURCE backends/cpu/cpu_ops.c backends/cpu/cpu_bn.c backends/cpu/cpu_fused.c
               APPEND PROPERTY COMPILE_OPTIONS $<$<NOT:$<CONFIG:Debug>>:-O3>)
endif()
# The fused ops' selects (cpu_fused.c) if-convert only when comparisons may be assumed not to
# trap; no result depends on floating-point exception flags, so nothing changes but the speed.
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  set_property(SOURCE backends/cpu/cpu_fused.c APPEND PROPERTY COMPILE_OPTIONS -fno-trapping-math)
endif()
