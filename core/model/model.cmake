# Models: the layer graph (specs, planning, memory, parameters), forward and backward, weight
# files and JSON model files; each layer kind's operations in its family's file under layers/.
list(APPEND DPT_SOURCES core/model/model.c core/model/model_exec.c core/model/model_io.c
     core/model/model_json.c core/model/layer_kind.c core/model/layer_table.c
     core/model/layer_util.c core/model/layers/activation.c core/model/layers/attention.c
     core/model/layers/combine.c core/model/layers/conv.c core/model/layers/dense.c
     core/model/layers/embedding.c core/model/layers/norm.c)
