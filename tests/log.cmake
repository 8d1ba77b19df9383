# A run's log directory (core/log/): CRC-32C known answers, the TensorBoard event encoder's bytes,
# an event file read back frame by frame, the directory's refusal of another run's files.
dpt_add_check_test(NAME test_tb_events SOURCES core/log/test_tb_events.c
                   LIBS PkgConfig::DPT_JANSSON LABELS unit TIMEOUT 60)
