# The CPU backend within what OpenBLAS can serve: more backends than its buffer pool at once,
# and an address-space limit. OPENBLAS_NUM_THREADS=2 bounds the worker buffers the forked
# children of `rlimit` map (each worker maps one when its pool starts again after fork).
dpt_add_check_test(NAME test_cpu_openblas_threads TARGET test_cpu_openblas
                   SOURCES backends/test_cpu_openblas.c ARGS threads LABELS unit cpu TIMEOUT 120)
dpt_add_check_test(NAME test_cpu_openblas_rlimit TARGET test_cpu_openblas ARGS rlimit
                   LABELS unit cpu TIMEOUT 60 ENVIRONMENT OPENBLAS_NUM_THREADS=2)
