# Model descriptions: JSON written and read back field by field, carried in weights files.
dpt_add_check_test(NAME test_model_json SOURCES core/model/test_model_json.c LABELS unit train TIMEOUT 60)
