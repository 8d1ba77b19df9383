# The Debian packages (cmake/DptPackage.cmake) install and serve a program outside the tree, and
# the shared library keeps the ABI of its soname (cmake/abi/).
set(_dpt_san "")
if(DPT_SANITIZE)
  set(_dpt_san "-fsanitize=address,undefined")
endif()
add_test(NAME package
         COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/package_test.sh" "${PROJECT_BINARY_DIR}"
                 "${PROJECT_SOURCE_DIR}" "${CMAKE_CURRENT_BINARY_DIR}/package-scratch"
                 "${CMAKE_C_COMPILER}" "${_dpt_san}")
set_tests_properties(package PROPERTIES TIMEOUT 600 LABELS install SKIP_RETURN_CODE 77)
add_test(NAME abi COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/abi_test.sh"
                          "${PROJECT_BINARY_DIR}" "${PROJECT_SOURCE_DIR}")
set_tests_properties(abi PROPERTIES TIMEOUT 120 LABELS install SKIP_RETURN_CODE 77)
