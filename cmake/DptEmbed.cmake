# dpt_embed_files(OUTPUT <file.c> SYMBOL <prefix> FILES <f1> [<f2> ...])
#
# Generates at build time a C file that holds every input file as a byte array, so the library
# needs no file at run time:
#   const struct dpt_embedded_file <prefix>[];  /* {name, data, size}, ends with {NULL, NULL, 0} */
# `name` is the file's base name. Data is followed by a NUL byte (not counted in size), so text
# files can be used as C strings. Works for binary files (SPIR-V) as well as text (.cl).
set(DPT_EMBED_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/DptEmbedScript.cmake")

function(dpt_embed_files)
  cmake_parse_arguments(E "" "OUTPUT;SYMBOL" "FILES" ${ARGN})
  if(NOT E_OUTPUT OR NOT E_SYMBOL OR NOT E_FILES)
    message(FATAL_ERROR "dpt_embed_files: OUTPUT, SYMBOL and FILES are required")
  endif()
  string(REPLACE ";" "|" files_arg "${E_FILES}")
  add_custom_command(
    OUTPUT "${E_OUTPUT}"
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${E_OUTPUT} -DSYMBOL=${E_SYMBOL} "-DFILES=${files_arg}"
            -P "${DPT_EMBED_SCRIPT}"
    DEPENDS ${E_FILES} "${DPT_EMBED_SCRIPT}"
    COMMENT "Embedding ${E_SYMBOL}"
    VERBATIM)
  # Listed for the one target that generates them (CMakeLists.txt: dptrain_generated).
  set_property(GLOBAL APPEND PROPERTY DPT_GENERATED_SOURCES "${E_OUTPUT}")
endfunction()
