/* Subcommands of the dptrain tool: each a main-like body returning the exit code. */
#ifndef DPTRAIN_TOOLS_COMMANDS_H
#define DPTRAIN_TOOLS_COMMANDS_H

int dpt_cmd_train(int argc, char **argv);
int dpt_cmd_eval(int argc, char **argv);
int dpt_cmd_predict(int argc, char **argv);
int dpt_cmd_checkpoint(int argc, char **argv);
int dpt_cmd_run(int argc, char **argv);
int dpt_cmd_tokenize(int argc, char **argv);
int dpt_cmd_data(int argc, char **argv);
int dpt_cmd_data_debian(int argc, char **argv);

#endif
