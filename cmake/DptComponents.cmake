# The install components, defined here once. Every install() rule names one of them, and each
# becomes one Debian package (cmake/DptPackage.cmake, docs/install.md):
#
#   component  variable              package            what it holds
#   lib        DPT_COMPONENT_LIB     libdptrain<abi>    the shared library (kernels and SPIR-V
#                                                       are embedded in it: no data files)
#   dev        DPT_COMPONENT_DEV     libdptrain-dev     headers, static library, the .so link,
#                                                       CMake package config, pkg-config file
#   tool       DPT_COMPONENT_TOOL    dptrain            the dptrain command, its man page and
#                                                       bash completion
#   python     DPT_COMPONENT_PYTHON  python3-dptrain    the Python module; packaged only when
#                                                       some rule installs into it
#
# A rule reads: install(FILES dptrain.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
#                       COMPONENT ${DPT_COMPONENT_TOOL})
# A rule without COMPONENT lands in no package (ctest `package` fails on such a file).
set(DPT_COMPONENT_LIB lib)
set(DPT_COMPONENT_DEV dev)
set(DPT_COMPONENT_TOOL tool)
set(DPT_COMPONENT_PYTHON python)
set(DPT_COMPONENTS ${DPT_COMPONENT_LIB} ${DPT_COMPONENT_DEV} ${DPT_COMPONENT_TOOL}
                   ${DPT_COMPONENT_PYTHON})
