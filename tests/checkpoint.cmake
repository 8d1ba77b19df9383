# Checkpoint files: the progress as JSON, CRCs, the directory's newest valid one, export.
dpt_add_check_test(NAME test_checkpoint SOURCES core/io/test_checkpoint.c LABELS unit data TIMEOUT 60)
