/* The subcommands of the pfl command. Each returns the process exit code. */
#ifndef PFL_CLI_CLI_H
#define PFL_CLI_CLI_H

int cmd_run(int argc, char **argv);
int cmd_partition(int argc, char **argv);
/* pfl resume DIR: goes on with a run from DIR/checkpoint (cmd_run.c). */
int cmd_resume(int argc, char **argv);
int cmd_model(int argc, char **argv);

/* The default data directory: $PFL_DATA, else ./data. */
const char *cli_default_data_dir(void);

#include <stdbool.h>
#include <stdint.h>

#include "data/data.h"

/* Loads the dataset and partitions it, printing what it does to stderr
 * unless quiet. On failure everything is freed and -1 returned with a message. */
int cli_load_partitioned(const char *data_name, const char *data_dir, const char *partition, int clients,
                         uint64_t seed, bool quiet, pfl_dataset *d, pfl_partition *p);
/* FedTSDP: the same with the per-client train fraction (0.75 above) and the
 * number of trailing samples held out from every client (0 above). */
int cli_load_partitioned_split(const char *data_name, const char *data_dir, const char *partition, int clients,
                               uint64_t seed, bool quiet, double train_fraction, int holdout, pfl_dataset *d,
                               pfl_partition *p);

#endif
