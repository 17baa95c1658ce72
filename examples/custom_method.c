/* A method written outside pfl: FedAvg with a server learning rate (Reddi
 * et al., "Adaptive Federated Optimization", 2021, FedAvg with eta_g): the
 * server moves the global model only part of the way to the clients'
 * average, w <- w + eta * (average - w). --server-lr 1 is FedAvg's step, 0
 * keeps the initial model. Everything else is FedAvg's stages.
 *
 *   cc custom_method.c $(pkg-config --cflags --libs pfl) -o custom_method
 *   ./custom_method --data mnist --model mlp --rounds 2 --server-lr 0.5
 *
 * The command line is pfl run's (every flag of `pfl run --help`), with
 * --algo fedavg-slr by default. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pfl.h>

/* The global model before aggregation (the method's state). */
static int slr_create(pfl_fl *fl) {
    fl->algo_state = pfl_malloc(sizeof(float) * pfl_model_vector_len(fl->model));
    return fl->algo_state ? 0 : -1;
}

static void slr_destroy(pfl_fl *fl) {
    free(fl->algo_state);
    fl->algo_state = NULL;
}

static void slr_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    float *before = fl->algo_state;
    memcpy(before, fl->global, sizeof(float) * pfl_model_vector_len(fl->model));
    pfl_default_aggregate(fl, clients, n, uploads); /* fl->global = the weighted average */
    const float eta = (float)pfl_fl_param(fl, "server-lr");
    for (size_t i = 0; i < fl->model->num_params; i++) /* BatchNorm statistics: the average */
        fl->global[i] = before[i] + eta * (fl->global[i] - before[i]);
}

/* Its one flag: a parameter with no field in pfl_algo_params (the extra store). */
static const pfl_param slr_params[] = {
    {.name = "server-lr", .type = PFL_PARAM_FLOAT, .block = PFL_BLOCK_EXTRA, .def = 1.0, .min = 0, .max = 10,
     .metavar = "F", .help = "server learning rate: w <- w + F * (average - w)"},
};

static const pfl_algo fedavg_slr = {
    .name = "fedavg-slr",
    .description = "FedAvg with a server learning rate (--server-lr)",
    PFL_PARAMS(slr_params),
    .has_global = true,
    .create = slr_create,
    .destroy = slr_destroy,
    .aggregate = slr_aggregate,
};

int main(int argc, char **argv) {
    pfl_init(argv); /* first: the BLAS kernels the pfl command computes with (run/run.h) */
    if (pfl_algo_register(&fedavg_slr)) {
        fprintf(stderr, "custom_method: %s\n", pfl_errmsg());
        return 1;
    }
    /* pfl run's flags, after a default --algo (a later --algo wins) */
    char **args = malloc(sizeof(char *) * (size_t)argc);
    if (!args) return 1;
    args[0] = "--algo=fedavg-slr";
    for (int i = 1; i < argc; i++) args[i] = argv[i];
    pfl_run_options o;
    if (pfl_run_options_parse(&o, argc, args, false)) {
        fprintf(stderr, "custom_method: %s\n", pfl_errmsg());
        free(args);
        return 2;
    }
    int rc = pfl_run(&o, NULL);
    if (rc) fprintf(stderr, "custom_method: %s\n", pfl_errmsg());
    free(args);
    return rc ? 1 : 0;
}
