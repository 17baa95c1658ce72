/* The subcommands of the pfl command (cmd_*.c), which main.c dispatches to.
 * Each returns the process exit code. They call down into src/run/ and the
 * library, never back into main.c. */
#ifndef PFL_CLI_COMMANDS_H
#define PFL_CLI_COMMANDS_H

int cmd_run(int argc, char **argv);
int cmd_partition(int argc, char **argv);
/* pfl resume DIR: goes on with a run from DIR/checkpoint (cmd_run.c). */
int cmd_resume(int argc, char **argv);
int cmd_model(int argc, char **argv);
/* pfl plot, pfl table: pictures and tables of run folders (cmd_plot.c). */
int cmd_plot(int argc, char **argv);
int cmd_table(int argc, char **argv);
/* pfl preset FILE: a paper's preset, its cells and whether they run (cmd_preset.c). */
int cmd_preset(int argc, char **argv);
/* pfl export RUN_DIR --results-h5 FILE: a run as PFLlib's results file (cmd_export.c). */
int cmd_export(int argc, char **argv);

#endif
