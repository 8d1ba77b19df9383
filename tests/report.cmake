# dptrain report (tools/report_cmd.c, tools/report_svg.c): the decimation, the ticks and the
# chart's "no data"; the HTML of a real run and of hand-written logs, the refusals; a render
# in headless Chromium (skipped, 77, where chromium is not installed).
dpt_add_check_test(NAME test_report_svg
                   SOURCES tools/test_report_svg.c ${PROJECT_SOURCE_DIR}/tools/report_svg.c
                   LABELS unit TIMEOUT 60)

if(DPT_BUILD_TOOLS)
  add_test(NAME report_cli
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/report_test.sh" $<TARGET_FILE:dptrain_cli>
                   "${CMAKE_CURRENT_BINARY_DIR}/report-scratch")
  set_tests_properties(report_cli PROPERTIES TIMEOUT 300 LABELS "cli")
  add_test(NAME report_render
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/report_render_test.sh"
                   $<TARGET_FILE:dptrain_cli> "${CMAKE_CURRENT_BINARY_DIR}/report-render-scratch")
  set_tests_properties(report_render PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli")
endif()
