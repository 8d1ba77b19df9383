/* Subcommands of the dptrain tool: each a main-like body returning the exit code. */
#ifndef DPTRAIN_TOOLS_COMMANDS_H
#define DPTRAIN_TOOLS_COMMANDS_H

#include "tools/options.h"

int dpt_cmd_train(int argc, char **argv);
int dpt_cmd_eval(int argc, char **argv);
int dpt_cmd_predict(int argc, char **argv);
int dpt_cmd_checkpoint(int argc, char **argv);
int dpt_cmd_run(int argc, char **argv);
int dpt_cmd_tokenize(int argc, char **argv);
int dpt_cmd_data(int argc, char **argv);
int dpt_cmd_data_debian(int argc, char **argv);
int dpt_cmd_data_images(int argc, char **argv);
int dpt_cmd_report(int argc, char **argv);

/* Each command's options (tools/options.h), for dptrain help --reference. */
const dpt_opt_cmd *dpt_train_options(void);
const dpt_opt_cmd *dpt_eval_options(void);
const dpt_opt_cmd *dpt_predict_options(void);
const dpt_opt_cmd *dpt_tokenize_options(void);
const dpt_opt_cmd *dpt_checkpoint_info_options(void);
const dpt_opt_cmd *dpt_checkpoint_export_options(void);
const dpt_opt_cmd *dpt_run_options(void);
const dpt_opt_cmd *dpt_data_convert_options(void);
const dpt_opt_cmd *dpt_data_npy_options(void);
const dpt_opt_cmd *dpt_data_info_options(void);
const dpt_opt_cmd *dpt_data_synth_options(void);
const dpt_opt_cmd *dpt_data_debian_options(void);
const dpt_opt_cmd *dpt_data_images_options(void);
const dpt_opt_cmd *dpt_report_options(void);

#endif
