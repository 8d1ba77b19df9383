# The guides' worked examples (docs/layers.md, *Adding a layer kind*; docs/training.md, *Adding
# an exchange kind*), built as the pages show them. cmake/DptGuides.cmake takes each page's new
# file and registration line into guides/ of the build tree (the line added to a copy of the
# file that holds the list); test_guides is built from those files, the sources that read the
# layer kinds' map (compiled against the copy of model.h), and the static library for the rest:
# its objects of the same names are not linked in. A page that disagrees with the tree fails
# this target's build; one whose example misbehaves fails the test.
set(_dpt_g "${CMAKE_CURRENT_BINARY_DIR}/guides")
set(_dpt_g_script "${PROJECT_SOURCE_DIR}/cmake/DptGuides.cmake")
set(_dpt_g_layer core/model/layers/scale.c include/dptrain/model.h)
set(_dpt_g_exchange core/train/exchange_halves.c core/train/exchange_kinds.c)
set(_dpt_g_files "")
foreach(_dpt_g_page IN ITEMS layer exchange)
  set(_dpt_g_doc "${PROJECT_SOURCE_DIR}/docs/layers.md")
  if(_dpt_g_page STREQUAL "exchange")
    set(_dpt_g_doc "${PROJECT_SOURCE_DIR}/docs/training.md")
  endif()
  set(_dpt_g_out "")
  foreach(_dpt_g_path IN LISTS _dpt_g_${_dpt_g_page})
    list(APPEND _dpt_g_out "${_dpt_g}/${_dpt_g_path}")
  endforeach()
  list(GET _dpt_g_${_dpt_g_page} 1 _dpt_g_list) # the file the registration line goes into
  string(REPLACE ";" "," _dpt_g_expect "${_dpt_g_${_dpt_g_page}}")
  # The files are rewritten only when they change; the stamp says the page was read.
  add_custom_command(
    OUTPUT "${_dpt_g}/${_dpt_g_page}.stamp"
    BYPRODUCTS ${_dpt_g_out}
    COMMAND ${CMAKE_COMMAND} "-DDOC=${_dpt_g_doc}" "-DSRC=${PROJECT_SOURCE_DIR}" "-DOUT=${_dpt_g}"
            "-DEXPECT=${_dpt_g_expect}" -P "${_dpt_g_script}"
    COMMAND ${CMAKE_COMMAND} -E touch "${_dpt_g}/${_dpt_g_page}.stamp"
    DEPENDS "${_dpt_g_doc}" "${PROJECT_SOURCE_DIR}/${_dpt_g_list}" "${_dpt_g_script}"
    COMMENT "Taking the ${_dpt_g_page} guide's example out of ${_dpt_g_doc}"
    VERBATIM)
  list(APPEND _dpt_g_files "${_dpt_g}/${_dpt_g_page}.stamp")
endforeach()
add_custom_target(guides_examples DEPENDS ${_dpt_g_files})

dpt_add_check_test(NAME guides TARGET test_guides
                   SOURCES docs/test_guides.c "${_dpt_g}/core/model/layers/scale.c"
                           "${_dpt_g}/core/train/exchange_halves.c"
                           "${_dpt_g}/core/train/exchange_kinds.c"
                           "${PROJECT_SOURCE_DIR}/core/model/layer_table.c"
                           "${PROJECT_SOURCE_DIR}/core/model/layer_kind.c"
                   LABELS unit train TIMEOUT 120)
add_dependencies(test_guides guides_examples)
target_include_directories(test_guides BEFORE PRIVATE "${_dpt_g}/include")
target_compile_definitions(test_guides PRIVATE DPT_BUILDING)
