# Debian packages from this build, one per install component (cmake/DptComponents.cmake):
#   cmake --build build && (cd build && cpack -G DEB)
# CPack runs the same install rules as `cmake --install` on the build already made, so the
# packages cannot drift from the install (docs/install.md). Each package's Depends is what
# dpkg-shlibdeps finds its ELF files need, plus the dependencies between our own packages.
set(DPT_PACKAGE_MAINTAINER "dptrain authors <dptrain@example.org>"
    CACHE STRING "Maintainer field of the Debian packages")

set(_dpt_ver "${PROJECT_VERSION}")
set(_dpt_lib_pkg "libdptrain${DPT_ABI_VERSION}")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dptrain)
set(CPACK_PACKAGE_VERSION "${_dpt_ver}")
set(CPACK_PACKAGE_CONTACT "${DPT_PACKAGE_MAINTAINER}")
# Each package's description has its own synopsis line (below): no shared one to prepend.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The library's package carries a shlibs file: programs built against 0.1.x need >= 0.1.x.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_PACKAGE_DIRECTORY "${PROJECT_BINARY_DIR}/packages")

# A package for each component some install rule fills: python3-dptrain only once the Python
# module installs, dptrain only when the tools are built (DPT_BUILD_TOOLS).
get_cmake_property(_dpt_installed COMPONENTS)
set(CPACK_COMPONENTS_ALL "")
foreach(_dpt_comp IN LISTS DPT_COMPONENTS)
  if(_dpt_comp IN_LIST _dpt_installed)
    list(APPEND CPACK_COMPONENTS_ALL ${_dpt_comp})
  endif()
endforeach()

# The -dev package's CMake config and pkg-config file name the libraries the static library
# needs (find_dependency, Requires.private): their -dev packages come with it.
set(_dpt_dev_deps "${_dpt_lib_pkg} (= ${_dpt_ver})" pkg-config zlib1g-dev libjansson-dev)
foreach(_dpt_pair IN ITEMS OPENBLAS:libopenblas-dev ONEDNN:libdnnl-dev
                           OPENCL:ocl-icd-opencl-dev OPENCL:libclblast-dev
                           VULKAN:libvulkan-dev MPI:libopenmpi-dev)
  string(REPLACE ":" ";" _dpt_pair "${_dpt_pair}")
  list(GET _dpt_pair 0 _dpt_opt)
  list(GET _dpt_pair 1 _dpt_deb)
  if(DPT_WITH_${_dpt_opt})
    list(APPEND _dpt_dev_deps ${_dpt_deb})
  endif()
endforeach()
list(REMOVE_DUPLICATES _dpt_dev_deps)
list(JOIN _dpt_dev_deps ", " _dpt_dev_deps)

# Per package: name, section, description (synopsis, then the long text), own dependencies.
set(CPACK_DEBIAN_LIB_PACKAGE_NAME "${_dpt_lib_pkg}")
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_LIB_PACKAGE_SUGGESTS "pocl-opencl-icd | opencl-icd, mesa-vulkan-drivers | vulkan-icd")
set(CPACK_COMPONENT_LIB_DESCRIPTION
    "data-parallel training of neural networks on any GPU (library)
dptrain trains neural networks data-parallel on GPUs of any vendor through
OpenCL and Vulkan compute, or on the CPU, with a ring all-reduce across
replicas, threads and MPI ranks.
.
This package holds the shared library; its OpenCL kernels and SPIR-V shaders
are built into it.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libdptrain-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${_dpt_dev_deps}")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "data-parallel training of neural networks on any GPU (development files)
dptrain trains neural networks data-parallel on GPUs of any vendor through
OpenCL and Vulkan compute, or on the CPU.
.
This package holds the headers, the static library, the CMake package
configuration (find_package(dptrain)) and the pkg-config file.")

set(CPACK_DEBIAN_TOOL_PACKAGE_NAME dptrain)
set(CPACK_DEBIAN_TOOL_PACKAGE_SECTION science)
set(CPACK_DEBIAN_TOOL_PACKAGE_SUGGESTS "openmpi-bin, dataset-fashion-mnist, fortunes")
set(CPACK_COMPONENT_TOOL_DESCRIPTION
    "data-parallel training of neural networks on any GPU (command)
dptrain trains neural networks data-parallel on GPUs of any vendor through
OpenCL and Vulkan compute, or on the CPU.
.
This package holds the dptrain command: train, evaluate, predict, inspect
checkpoints, prepare data, benchmark and report.")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-dptrain)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "${_dpt_lib_pkg} (= ${_dpt_ver}), python3")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION
    "data-parallel training of neural networks on any GPU (Python 3)
dptrain trains neural networks data-parallel on GPUs of any vendor through
OpenCL and Vulkan compute, or on the CPU.
.
This package holds the Python 3 module.")

# Every package's /usr/share/doc/<package>: copyright (from LICENSE, machine-readable) and a
# changelog. EXCLUDE_FROM_ALL: only the per-component installs CPack runs put them there, a
# plain `cmake --install` does not.
file(READ "${PROJECT_SOURCE_DIR}/LICENSE" _dpt_license)
string(REGEX MATCH "Copyright \\(c\\) ([^\n]*)\n" _dpt_holder "${_dpt_license}")
set(_dpt_holder "${CMAKE_MATCH_1}")
string(REGEX REPLACE "^.*Copyright \\(c\\) [^\n]*\n\n" "" _dpt_license "${_dpt_license}")
string(REGEX REPLACE "\n\n" "\n.\n" _dpt_license "${_dpt_license}")
string(REGEX REPLACE "\n$" "" _dpt_license "${_dpt_license}")
string(REGEX REPLACE "\n" "\n " _dpt_license "${_dpt_license}")
file(WRITE "${PROJECT_BINARY_DIR}/debian/copyright"
     "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
     "Upstream-Name: dptrain\n\nFiles: *\nCopyright: ${_dpt_holder}\nLicense: Expat\n"
     " ${_dpt_license}\n")
set(DPT_DEB_SOURCE dptrain)
string(TIMESTAMP DPT_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC) # SOURCE_DATE_EPOCH if set
configure_file(cmake/debian/changelog.in "${PROJECT_BINARY_DIR}/debian/changelog" @ONLY)
find_program(DPT_GZIP gzip)
if(DPT_GZIP)
  execute_process(COMMAND "${DPT_GZIP}" -9nc INPUT_FILE "${PROJECT_BINARY_DIR}/debian/changelog"
                  OUTPUT_FILE "${PROJECT_BINARY_DIR}/debian/changelog.gz")
endif()
foreach(_dpt_comp IN LISTS CPACK_COMPONENTS_ALL)
  string(TOUPPER "${_dpt_comp}" _dpt_up)
  set(_dpt_doc "${CMAKE_INSTALL_DATAROOTDIR}/doc/${CPACK_DEBIAN_${_dpt_up}_PACKAGE_NAME}")
  install(FILES "${PROJECT_BINARY_DIR}/debian/copyright" DESTINATION "${_dpt_doc}"
          COMPONENT ${_dpt_comp} EXCLUDE_FROM_ALL)
  if(DPT_GZIP)
    install(FILES "${PROJECT_BINARY_DIR}/debian/changelog.gz" DESTINATION "${_dpt_doc}"
            COMPONENT ${_dpt_comp} EXCLUDE_FROM_ALL)
  endif()
endforeach()

# The library runs ldconfig through a trigger; the maintainer scripts then have nothing to do.
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA "${PROJECT_SOURCE_DIR}/cmake/debian/triggers"
    "${PROJECT_SOURCE_DIR}/cmake/debian/postinst" "${PROJECT_SOURCE_DIR}/cmake/debian/postrm")
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(DPT_LIB_PACKAGE "${_dpt_lib_pkg}")
configure_file(cmake/debian/lintian-overrides.in "${PROJECT_BINARY_DIR}/debian/${_dpt_lib_pkg}" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/debian/${_dpt_lib_pkg}"
        DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides"
        COMPONENT ${DPT_COMPONENT_LIB} EXCLUDE_FROM_ALL)

include(CPack)
