# OpenCL backend (included by the top-level CMakeLists.txt when DPT_WITH_OPENCL is ON).
# Kernels: backends/opencl/kernels/*.cl, embedded into the library at build time and compiled
# as one program per backend on its first op. gemm: CLBlast. OpenCL 1.2 API only.
set(DPT_OCL_KERNEL_FILES
    common.cl
    elementwise.cl
    reduce.cl
    softmax.cl
    conv.cl
    embed.cl
    optim.cl
    half.cl
    layers.cl)
list(TRANSFORM DPT_OCL_KERNEL_FILES PREPEND "${CMAKE_CURRENT_LIST_DIR}/kernels/")
set(DPT_OCL_EMBEDDED "${CMAKE_CURRENT_BINARY_DIR}/dpt_opencl_kernels.c")
dpt_embed_files(OUTPUT "${DPT_OCL_EMBEDDED}" SYMBOL dpt_opencl_kernels
                FILES ${DPT_OCL_KERNEL_FILES})

list(APPEND DPT_SOURCES
     backends/opencl/ocl_backend.c
     backends/opencl/ocl_error.c
     backends/opencl/ocl_gemm.c
     backends/opencl/ocl_ops.c
     backends/opencl/ocl_layers.c
     backends/opencl/ocl_program.c
     "${DPT_OCL_EMBEDDED}")
list(APPEND DPT_PRIVATE_LIBS OpenCL::OpenCL "${DPT_CLBLAST_LIBRARY}")
list(APPEND DPT_PRIVATE_INCLUDES "${DPT_CLBLAST_INCLUDE}")
list(APPEND DPT_PRIVATE_DEFS DPT_HAVE_OPENCL CL_TARGET_OPENCL_VERSION=120)
list(APPEND DPT_PKG_REQUIRES_PRIVATE OpenCL clblast)
