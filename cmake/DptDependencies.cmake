# Finds the optional dependencies and sets DPT_WITH_<X> (default ON when found). Asking for a
# component whose dependency is missing is a configure error naming the Debian package.

macro(dpt_optional_dependency option found description packages)
  if(NOT DEFINED ${option})
    set(_dpt_default ${${found}})
  else()
    set(_dpt_default ${${option}})
  endif()
  option(${option} "Build ${description}" ${_dpt_default})
  if(${option} AND NOT ${found})
    message(FATAL_ERROR "${option}=ON but ${description} was not found: "
                        "install the Debian package(s) ${packages}")
  elseif(NOT ${found})
    message(STATUS "${description}: not found, ${option}=OFF (install ${packages} to enable)")
  endif()
endmacro()

# OpenCL + CLBlast
find_package(OpenCL QUIET)
find_library(DPT_CLBLAST_LIBRARY clblast)
find_path(DPT_CLBLAST_INCLUDE clblast_c.h)
if(OpenCL_FOUND AND DPT_CLBLAST_LIBRARY AND DPT_CLBLAST_INCLUDE)
  set(DPT_OPENCL_FOUND TRUE)
else()
  set(DPT_OPENCL_FOUND FALSE)
endif()
dpt_optional_dependency(DPT_WITH_OPENCL DPT_OPENCL_FOUND "the OpenCL backend (OpenCL + CLBlast)"
                        "ocl-icd-opencl-dev opencl-headers libclblast-dev")

# Vulkan + glslc
find_package(Vulkan QUIET)
find_program(DPT_GLSLC glslc)
find_program(DPT_SPIRV_VAL spirv-val)
if(Vulkan_FOUND AND DPT_GLSLC)
  set(DPT_VULKAN_FOUND TRUE)
else()
  set(DPT_VULKAN_FOUND FALSE)
endif()
dpt_optional_dependency(DPT_WITH_VULKAN DPT_VULKAN_FOUND "the Vulkan backend (Vulkan + glslc)"
                        "libvulkan-dev glslc spirv-tools")

# MPI
find_package(MPI QUIET COMPONENTS C)
if(MPI_C_FOUND)
  set(DPT_MPI_FOUND TRUE)
else()
  set(DPT_MPI_FOUND FALSE)
endif()
dpt_optional_dependency(DPT_WITH_MPI DPT_MPI_FOUND "the MPI transport (Open MPI)"
                        "libopenmpi-dev openmpi-bin")

# OpenBLAS for the CPU backend's gemm (the portable blocked kernel is always built)
set(DPT_OPENBLAS_FOUND FALSE)
if(PkgConfig_FOUND)
  pkg_check_modules(DPT_OPENBLAS QUIET IMPORTED_TARGET openblas)
  if(DPT_OPENBLAS_FOUND)
    set(DPT_OPENBLAS_FOUND TRUE)
  endif()
endif()
dpt_optional_dependency(DPT_WITH_OPENBLAS DPT_OPENBLAS_FOUND "OpenBLAS gemm for the CPU backend"
                        "libopenblas-dev")

# oneDNN for the CPU backend's convolutions (im2col + gemm otherwise)
find_library(DPT_DNNL_LIBRARY dnnl)
find_path(DPT_DNNL_INCLUDE dnnl.h)
if(DPT_DNNL_LIBRARY AND DPT_DNNL_INCLUDE)
  set(DPT_ONEDNN_FOUND TRUE)
else()
  set(DPT_ONEDNN_FOUND FALSE)
endif()
dpt_optional_dependency(DPT_WITH_ONEDNN DPT_ONEDNN_FOUND "oneDNN convolutions for the CPU backend"
                        "libdnnl-dev")
