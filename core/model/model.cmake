# Models: the layer graph (specs, planning, memory, parameters), forward and backward, weight
# files and JSON model files, and the layer kinds' names.
list(APPEND DPT_SOURCES core/model/model.c core/model/model_exec.c core/model/model_io.c
     core/model/model_json.c core/model/layer_kind.c)
