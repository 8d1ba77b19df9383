# A run's log directory: settings, per-step and evaluation records as JSON lines, and a
# TensorBoard event file of the same scalars (its encoder written here, no protobuf library).
list(APPEND DPT_SOURCES core/log/tb_events.c core/log/run_log.c)
