# The installed library works for a program outside the tree (find_package and pkg-config), and
# exports only dpt_ symbols.
set(_dpt_san "")
if(DPT_SANITIZE)
  set(_dpt_san "-fsanitize=address,undefined")
endif()
add_test(NAME install
         COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/install_test.sh" "${PROJECT_BINARY_DIR}"
                 "${PROJECT_SOURCE_DIR}" "${CMAKE_CURRENT_BINARY_DIR}/install-scratch"
                 "${CMAKE_C_COMPILER}" "${_dpt_san}")
set_tests_properties(install PROPERTIES TIMEOUT 300 LABELS install)
