# Models: the layer graph (specs, planning, memory, parameters), forward and backward, weight
# files and JSON model files; each layer kind's operations in a file under layers/, every file
# there taken (a new kind is its file and its line in DPT_LAYER_KIND_MAP).
file(GLOB _dpt_layer_files RELATIVE "${PROJECT_SOURCE_DIR}" CONFIGURE_DEPENDS
     "${CMAKE_CURRENT_LIST_DIR}/layers/*.c")
list(SORT _dpt_layer_files)
list(APPEND DPT_SOURCES core/model/model.c core/model/model_exec.c core/model/model_io.c
     core/model/model_json.c core/model/model_fuse.c core/model/layer_kind.c core/model/layer_table.c
     core/model/layer_util.c ${_dpt_layer_files})
