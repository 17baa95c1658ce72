/* A method written outside pfl that adds a term to the local loss: FedAvg
 * whose clients also distil the global model they received (the teacher,
 * run on each batch in evaluation mode) into the model they train,
 *
 *   loss = CE(z, y) + gamma T^2 KL(softmax(z_teacher / T) || softmax(z / T)),
 *
 * the knowledge-distillation loss of Hinton et al. (2015) toward the global
 * model (as FedGKD, Yao et al. 2021, with a buffer of one model). Everything
 * it adds is a loss term of the local step (pfl_loss_term); the round loop,
 * the executor and the optimizer are pfl's.
 *
 *   cc custom_loss.c $(pkg-config --cflags --libs pfl) -o custom_loss
 *   ./custom_loss --data mnist --model mlp --rounds 2 --kd-weight 0.5 --kd-temperature 2
 *
 * The command line is pfl run's, with --algo fedavg-kd by default. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pfl.h>

typedef struct {
    float temperature;
} kd_term;

/* T^2 KL(p_teacher || p_student) at temperature T, the batch mean; its
 * gradient with respect to the student's logits is T (p_student - p_teacher) / B. */
static double kd_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)correct;
    const kd_term *k = ctx;
    const double T = k->temperature;
    const int C = (int)b->n;
    double total = 0.0;
    for (int s = 0; s < b->B; s++) {
        const float *z = b->z + (size_t)s * C, *t = b->refs[0] + (size_t)s * C;
        double zmax = -INFINITY, tmax = -INFINITY, zsum = 0.0, tsum = 0.0;
        for (int c = 0; c < C; c++) zmax = fmax(zmax, z[c] / T), tmax = fmax(tmax, t[c] / T);
        for (int c = 0; c < C; c++) zsum += exp(z[c] / T - zmax), tsum += exp(t[c] / T - tmax);
        for (int c = 0; c < C; c++) {
            const double log_ps = z[c] / T - zmax - log(zsum), log_pt = t[c] / T - tmax - log(tsum);
            const double pt = exp(log_pt);
            total += pt * (log_pt - log_ps);
            dz[(size_t)s * C + c] = (float)(T * (exp(log_ps) - pt) / b->B);
        }
    }
    return T * T * total / b->B;
}

static void kd_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    kd_term k = {(float)pfl_fl_param(fl, "kd-temperature")};
    pfl_step s = pfl_step_default(fl);
    const pfl_loss_term term = {.name = "distillation toward the global model",
                                .at = PFL_AT_LOGITS,
                                .weight = (float)pfl_fl_param(fl, "kd-weight"),
                                .refs = {fl->global},
                                .num_refs = 1,
                                .value = kd_value,
                                .ctx = &k};
    pfl_step_add_term(&s, &term);
    pfl_step_run(fl, client, w, model, &s, stats);
}

static const pfl_param kd_params[] = {
    {.name = "kd-weight", .type = PFL_PARAM_FLOAT, .block = PFL_BLOCK_EXTRA, .def = 1.0, .min = 0, .max = 1e3,
     .metavar = "F", .help = "weight gamma of the distillation term"},
    {.name = "kd-temperature", .type = PFL_PARAM_FLOAT, .block = PFL_BLOCK_EXTRA, .def = 2.0, .min = 0.01,
     .max = 100, .metavar = "T", .help = "softmax temperature of teacher and student"},
};

static const pfl_algo fedavg_kd = {
    .name = "fedavg-kd",
    .description = "FedAvg whose clients distil the received global model (--kd-weight, --kd-temperature)",
    PFL_PARAMS(kd_params),
    .has_global = true,
    .local_train = kd_train,
};

int main(int argc, char **argv) {
    pfl_init(argv); /* first: the BLAS kernels the pfl command computes with (run/run.h) */
    if (pfl_algo_register(&fedavg_kd)) {
        fprintf(stderr, "custom_loss: %s\n", pfl_errmsg());
        return 1;
    }
    /* pfl run's flags, after a default --algo (a later --algo wins) */
    char **args = malloc(sizeof(char *) * (size_t)argc);
    if (!args) return 1;
    args[0] = "--algo=fedavg-kd";
    for (int i = 1; i < argc; i++) args[i] = argv[i];
    pfl_run_options o;
    if (pfl_run_options_parse(&o, argc, args, false)) {
        fprintf(stderr, "custom_loss: %s\n", pfl_errmsg());
        free(args);
        return 2;
    }
    int rc = pfl_run(&o, NULL);
    if (rc) fprintf(stderr, "custom_loss: %s\n", pfl_errmsg());
    free(args);
    return rc ? 1 : 0;
}
