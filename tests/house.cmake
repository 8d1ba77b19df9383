# The house rules of the source tree (tools/check_house.sh): no cycle between files, no folder
# including or calling a folder above it, clang-format clean, no function in core/ over 60 lines,
# with the known exceptions of tools/house_exceptions.txt. The call graph comes from this build's
# objects (nm), so the test belongs after the build. Skipped (77) without universal-ctags,
# clang-format or nm.
add_test(NAME house COMMAND bash "${PROJECT_SOURCE_DIR}/tools/check_house.sh"
                            --build "${PROJECT_BINARY_DIR}" "${PROJECT_SOURCE_DIR}")
set_tests_properties(house PROPERTIES TIMEOUT 120 LABELS "lint" SKIP_RETURN_CODE 77)
# docs/files.md is the file map tools/file_map.sh generates from each file's opening comment:
# the test fails when they differ (regenerate with tools/file_map.sh > docs/files.md).
add_test(NAME file_map COMMAND bash "${PROJECT_SOURCE_DIR}/tools/file_map.sh" --check
                               "${PROJECT_SOURCE_DIR}/docs/files.md")
set_tests_properties(file_map PROPERTIES TIMEOUT 60 LABELS "lint")
# docs/reference.md is `dptrain help --reference` (the commands' option tables, base/env.h's
# variables): the test fails with the diff when they differ.
if(DPT_BUILD_TOOLS)
  add_test(NAME reference COMMAND bash "${PROJECT_SOURCE_DIR}/tools/check_reference.sh"
                                  $<TARGET_FILE:dptrain_cli> "${PROJECT_SOURCE_DIR}/docs/reference.md")
  set_tests_properties(reference PROPERTIES TIMEOUT 60 LABELS "lint")
endif()
# Every getenv("DPT_...") of the sources is an entry of base/env.h's table, and the library and
# tools read only through dpt_env_get (tools/check_env.sh).
add_test(NAME env_table COMMAND bash "${PROJECT_SOURCE_DIR}/tools/check_env.sh" "${PROJECT_SOURCE_DIR}")
set_tests_properties(env_table PROPERTIES TIMEOUT 60 LABELS "lint")
