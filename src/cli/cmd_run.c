/* pfl run: one federated experiment, with progress on stderr and, with
 * --out DIR, metrics.jsonl (a line per evaluation, flushed as it happens) and
 * summary.json (written atomically at the end). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algos/algos.h"
#include "algos/fedalp.h" /* FedALP */
#include "algos/cfl.h"    /* CFL */
#include "cli/args.h"
#include "cli/cli.h"
#include "fl/fl.h"
#include "util/err.h"
#include "util/json.h"
#include "util/sha256.h"

typedef struct {
    const char *algo, *data, *model, *partition, *data_dir, *out;
    const char *bn; /* --bn */
    int clients, rounds, epochs, batch, eval_batch, threads, eval_every;
    double join, lr, momentum, weight_decay;
    uint64_t seed;
    bool quiet;
    /* algorithm hyperparameters */
    double mu, lambda;
    int personal_epochs, head_layers, head_epochs;
    /* fedamp, pfedcfr */
    double amp_alpha, amp_sigma, amp_lambda;
    int cfr_layers, local_steps;
    /* FedALP */
    int groups;
    double beta, warmup;
    /* pFedMe, CFL */
    int pfedme_k, cfl_warmup;
    double pfedme_lambda, pfedme_lr, pfedme_beta, cfl_eps1, cfl_eps2;
    /* FedTSDP (and the split, public set and decay any algorithm can use) */
    const char *public_set;
    int public_batch, tsdp_min_pts, tsdp_hopkins_m;
    double train_fraction, lr_decay, tsdp_eps1, tsdp_eps2, tsdp_h_th, tsdp_psi, tsdp_shared;
    /* modules */
    bool ala, flayer_agg, flayer_lr, flayer_mask, flayer_mask_literal;
    int ala_p, ala_max_epochs;
    double ala_s, ala_eta, ala_threshold;
} run_options;

static const char run_usage[] =
    "Usage: pfl run [flags]\n\n"
    "Runs --rounds rounds of federated training and evaluates every --eval-every rounds:\n"
    "personalized accuracy (each client's model on its own test split, sum correct / sum test),\n"
    "global accuracy (the global model on every client's test split) and the mean train loss.\n"
    "PFLlib's single-dash spellings (-algo -data -m -gr -nc -jr -lbs -ls -lr) are accepted too.";

#define NO_MAX 1e18

/* Room for the flag table; run_specs refuses to build past it. */
#define MAX_RUN_FLAGS 96

static int run_specs(run_options *o, arg_spec *specs) {
    const arg_spec table[] = {
        {"algo", "algo", ARG_STRING, &o->algo, 0, 0, false, "NAME",
         "algorithm: fedavg, local, fedprox, fedper, fedrep, ditto, fedala, flayer, fedamp, pfedcfr, fedalp, pfedme, cfl, "
         "fedtsdp"},
        {"data", "data", ARG_STRING, &o->data, 0, 0, false, "NAME", "dataset: mnist, fmnist, cifar10, cifar100, cifar100-coarse, svhn, tinyimagenet"},
        {"model", "m", ARG_STRING, &o->model, 0, 0, false, "NAME",
         "model: cnn, dnn, mlp, mnist-cnn, cifar-cnn, tsdp-cnn, resnet18, resnet18-cifar, alexnet (pfl model "
         "--model NAME prints its layers)"},
        {"partition", NULL, ARG_STRING, &o->partition, 0, 0, false, "P",
         "iid | pat[:K] | dir[:A[:MIN]] | onelabel[:TRAIN/TEST] | cfr[:K] (see README)"},
        {"clients", "nc", ARG_INT, &o->clients, 1, 1e7, false, "N", "number of clients"},
        {"join", "jr", ARG_DOUBLE, &o->join, 0, 1, true, "F", "fraction of clients per round, in (0, 1]"},
        {"rounds", "gr", ARG_INT, &o->rounds, 0, 1e7, false, "R", "global rounds"},
        {"epochs", "ls", ARG_INT, &o->epochs, 1, 1e5, false, "E", "local epochs per round"},
        {"batch", "lbs", ARG_INT, &o->batch, 1, 1e5, false, "B", "local batch size"},
        {"lr", "lr", ARG_DOUBLE, &o->lr, 0, 1e3, true, "F", "local learning rate (> 0)"},
        {"momentum", NULL, ARG_DOUBLE, &o->momentum, 0, 0.999, false, "F", "SGD momentum"},
        {"weight-decay", NULL, ARG_DOUBLE, &o->weight_decay, 0, 1e3, false, "F", "SGD weight decay (L2)"},
        {"seed", NULL, ARG_U64, &o->seed, 0, 9007199254740992.0, false, "S", "seed of every random stream"},
        {"threads", NULL, ARG_INT, &o->threads, 1, 4096, false, "T",
         "worker threads, clients trained in parallel; the default is the number of cores"},
        {"eval-every", "eg", ARG_INT, &o->eval_every, 1, 1e7, false, "K",
         "evaluate every K rounds (and after the last)"},
        {"eval-batch", NULL, ARG_INT, &o->eval_batch, 1, 1e5, false, "B", "batch size for evaluation only"},
        {"bn", NULL, ARG_STRING, &o->bn, 0, 0, false, "MODE",
         "BatchNorm layers (resnet18*): shared (averaged, running statistics too) | local (FedBN: weight, bias and "
         "statistics stay with each client) | stats-local (running statistics stay, as PFLlib)"},
        {"data-dir", NULL, ARG_STRING, &o->data_dir, 0, 0, false, "DIR", "data directory (env PFL_DATA)"},
        {"out", NULL, ARG_STRING, &o->out, 0, 0, false, "DIR", "write metrics.jsonl and summary.json here"},
        {"quiet", NULL, ARG_FLAG, &o->quiet, 0, 0, false, NULL, "no progress lines"},
        {"mu", NULL, ARG_DOUBLE, &o->mu, 0, 1e6, false, "F", "fedprox: proximal coefficient"},
        {"lambda", NULL, ARG_DOUBLE, &o->lambda, 0, 1e6, false, "F", "ditto: proximal coefficient of the personal model"},
        {"personal-epochs", NULL, ARG_INT, &o->personal_epochs, 1, 1e5, false, "E",
         "ditto: local epochs of the personal model"},
        {"head-layers", NULL, ARG_INT, &o->head_layers, 1, PFL_MAX_LAYERS, false, "S",
         "fedper, fedrep, flayer: layers in the personal head"},
        {"head-epochs", NULL, ARG_INT, &o->head_epochs, 0, 1e5, false, "E",
         "fedrep: epochs on the head (base frozen) before the base epochs"},
        /* fedamp, pfedcfr */
        {"amp-alpha", NULL, ARG_DOUBLE, &o->amp_alpha, 0, 1e12, true, "F",
         "fedamp, pfedcfr: message-passing weight alpha (xi_ij = alpha exp(-d/sigma)/sigma)"},
        {"amp-sigma", NULL, ARG_DOUBLE, &o->amp_sigma, 0, 1e12, true, "F", "fedamp, pfedcfr: sigma of A(x) = 1 - exp(-x/sigma)"},
        {"amp-lambda", NULL, ARG_DOUBLE, &o->amp_lambda, 0, 1e6, false, "F",
         "fedamp, pfedcfr: lambda, proximal coefficient lambda/alpha toward the fused model"},
        {"cfr-layers", NULL, ARG_INT, &o->cfr_layers, 0, PFL_MAX_LAYERS, false, "R",
         "pfedcfr: r, the first R layers fused per client, the rest averaged (paper: 1 dnn, 2 cnn)"},
        {"local-steps", NULL, ARG_INT, &o->local_steps, 0, 1e7, false, "K",
         "fedamp, pfedcfr: local SGD steps (batches) per round instead of --epochs (0: epochs; paper: 10)"},
        /* FedALP */
        {"groups", NULL, ARG_INT, &o->groups, 1, 1e7, false, "M", "fedalp: groups of clients (Ward clusters)"},
        {"beta", NULL, ARG_DOUBLE, &o->beta, 0, 1, false, "F", "fedalp: personalization factor, Psi = beta*delta/max(delta)"},
        {"warmup", NULL, ARG_DOUBLE, &o->warmup, 0, 1e7, true, "T",
         "fedalp: FedAvg warm-up rounds T_pre: a fraction of --rounds if < 1, else a count"},
        /* pFedMe */
        {"pfedme-k", NULL, ARG_INT, &o->pfedme_k, 1, 1e5, false, "K", "pfedme: inner steps on the personal model per batch"},
        {"pfedme-lambda", NULL, ARG_DOUBLE, &o->pfedme_lambda, 0, 1e6, false, "F",
         "pfedme: lambda, Moreau-envelope coefficient lambda/2 ||theta - w||^2"},
        {"pfedme-lr", NULL, ARG_DOUBLE, &o->pfedme_lr, 0, 1e3, false, "F", "pfedme: personal learning rate of the inner steps"},
        {"pfedme-beta", NULL, ARG_DOUBLE, &o->pfedme_beta, 0, 1, false, "F",
         "pfedme: server mix w_g = (1 - beta) w_g + beta * mean of uploads"},
        /* CFL */
        {"cfl-eps1", NULL, ARG_DOUBLE, &o->cfl_eps1, 0, 1e12, false, "F",
         "cfl: split a cluster when the norm of its mean update is below this (setting-dependent)"},
        {"cfl-eps2", NULL, ARG_DOUBLE, &o->cfl_eps2, 0, 1e12, false, "F",
         "cfl: ... and its largest client update norm is above this (setting-dependent)"},
        {"cfl-warmup", NULL, ARG_INT, &o->cfl_warmup, 0, 1e7, false, "R", "cfl: no split in rounds 1..R"},
        /* FedTSDP */
        {"train-fraction", NULL, ARG_DOUBLE, &o->train_fraction, 0, 1, true, "F",
         "share of each client's samples for training, the rest its test split (FedTSDP paper: 0.8)"},
        {"lr-decay", NULL, ARG_DOUBLE, &o->lr_decay, 0, 10, true, "F",
         "round r trains at lr * F^(r-1), every algorithm (1: none; FedTSDP paper: 0.95)"},
        {"public", NULL, ARG_STRING, &o->public_set, 0, 0, false, "N|test",
         "hold the dataset's last N samples out of every client as the server's unlabeled public set; test = "
         "the original test files (10000; svhn 26032); fedtsdp's default is test, the others' 0"},
        {"public-batch", NULL, ARG_INT, &o->public_batch, 0, 1e7, false, "B",
         "fedtsdp: public samples drawn per round (0: --batch)"},
        {"tsdp-eps1", NULL, ARG_DOUBLE, &o->tsdp_eps1, 0, 1e12, true, "F", "fedtsdp: DBSCAN eps of stage one (JS divergence)"},
        {"tsdp-eps2", NULL, ARG_DOUBLE, &o->tsdp_eps2, 0, 1e12, true, "F",
         "fedtsdp: DBSCAN eps of stage two (L2 distance of weights)"},
        {"tsdp-min-pts", NULL, ARG_INT, &o->tsdp_min_pts, 1, 1e7, false, "K", "fedtsdp: DBSCAN minPts (counting the point)"},
        {"tsdp-hth", NULL, ARG_DOUBLE, &o->tsdp_h_th, 0, 1, false, "F", "fedtsdp: cluster when the Hopkins statistic H > F"},
        {"tsdp-psi", NULL, ARG_DOUBLE, &o->tsdp_psi, 0, 1, true, "F",
         "fedtsdp: shared layers L_s *= F each time both stages run"},
        {"tsdp-shared-layers", NULL, ARG_DOUBLE, &o->tsdp_shared, 0, PFL_MAX_LAYERS, false, "L",
         "fedtsdp: initial shared layers L_s (0: all)"},
        {"tsdp-hopkins-m", NULL, ARG_INT, &o->tsdp_hopkins_m, 0, 1e7, false, "M",
         "fedtsdp: points the Hopkins statistic samples, m~ (0: half the clients)"},
        {"ala", NULL, ARG_FLAG, &o->ala, 0, 0, false, NULL, "module: FedALA's adaptive local aggregation, any algorithm"},
        {"ala-p", NULL, ARG_INT, &o->ala_p, 1, PFL_MAX_LAYERS, false, "P", "ALA: top layers mixed element-wise"},
        {"ala-s", NULL, ARG_DOUBLE, &o->ala_s, 0, 100, true, "PCT", "ALA: percent of the training split to learn on"},
        {"ala-eta", NULL, ARG_DOUBLE, &o->ala_eta, 0, 1e6, true, "F", "ALA: learning rate of the weights"},
        {"ala-threshold", NULL, ARG_DOUBLE, &o->ala_threshold, 0, 1e6, true, "F",
         "ALA: first round trains until the std of the last 10 epoch losses is below this"},
        {"ala-max-epochs", NULL, ARG_INT, &o->ala_max_epochs, 1, 4096, false, "E",
         "ALA: bound on the first round's epochs (warns when reached)"},
        {"flayer-agg", NULL, ARG_FLAG, &o->flayer_agg, 0, 0, false, NULL,
         "module: FLAYER's head init A*local + (1-A)*global, A = last local accuracy"},
        {"flayer-lr", NULL, ARG_FLAG, &o->flayer_lr, 0, 0, false, NULL, "module: FLAYER's per-layer learning rates"},
        {"flayer-mask", NULL, ARG_FLAG, &o->flayer_mask, 0, 0, false, NULL,
         "module: FLAYER's per-layer top-k upload mask"},
        {"flayer-mask-literal", NULL, ARG_FLAG, &o->flayer_mask_literal, 0, 0, false, NULL,
         "aggregate masked uploads as Eq. 9 reads (unsent elements count as 0)"},
    };
    int n = (int)(sizeof table / sizeof table[0]);
    _Static_assert(sizeof table / sizeof table[0] <= MAX_RUN_FLAGS, "raise MAX_RUN_FLAGS");
    memcpy(specs, table, sizeof table);
    return n;
}

static void default_options(run_options *o) {
    memset(o, 0, sizeof *o);
    o->algo = "fedavg", o->data = "mnist", o->model = "cnn", o->partition = "pat";
    o->clients = 20, o->join = 1.0, o->rounds = 100, o->epochs = 1, o->batch = 10;
    o->lr = 0.005, o->seed = 1, o->eval_every = 1, o->eval_batch = 100;
    o->threads = omp_get_num_procs();
    /* FedALA's appendix: FedProx mu 0.001, Ditto lambda 0.1 with 2 personal
     * epochs, FedRep 5 head epochs; heads of 1 layer (the CNN's output layer) */
    o->mu = 0.001, o->lambda = 0.1, o->personal_epochs = 2, o->head_layers = 1, o->head_epochs = 5;
    /* fedamp, pfedcfr: the pFedCFR paper's values (also its FedAMP settings):
     * alpha 1e4, sigma 1e6, lambda 1, r = 1 (the dnn; 2 for the cnn) */
    o->amp_alpha = 1e4, o->amp_sigma = 1e6, o->amp_lambda = 1.0, o->cfr_layers = 1, o->local_steps = 0;
    /* FedALP: 10 groups (its MNIST split: 10 clients per digit), beta 0.6 (its
     * Table 2), warm-up half the rounds (the paper: 40% to 70%) */
    o->groups = 10, o->beta = 0.6, o->warmup = 0.5;
    /* pFedMe: FedALA's appendix (K 5, lambda 15, personal lr 0.01, beta 1).
     * CFL: the reference code's eps1 0.4, eps2 1.6, splits after round 20 */
    o->pfedme_k = 5, o->pfedme_lambda = 15, o->pfedme_lr = 0.01, o->pfedme_beta = 1.0;
    o->cfl_eps1 = 0.4, o->cfl_eps2 = 1.6, o->cfl_warmup = 20;
    /* FedTSDP: the paper's eps1 0.15, eps2 3.5, minPts 2, h_th 0.65, psi 0.98;
     * the split and decay keep pfl's defaults (paper: 0.8 and 0.95) */
    o->train_fraction = 0.75, o->lr_decay = 1.0, o->public_set = NULL, o->public_batch = 0;
    o->tsdp_eps1 = 0.15, o->tsdp_eps2 = 3.5, o->tsdp_min_pts = 2, o->tsdp_h_th = 0.65, o->tsdp_psi = 0.98;
    o->tsdp_shared = 0;
    /* FedALA's defaults: p = 1 layer, s = 80%, eta = 1.0, threshold 0.1 */
    o->ala_p = 1, o->ala_s = 80, o->ala_eta = 1.0, o->ala_threshold = 0.1, o->ala_max_epochs = 100;
    o->data_dir = cli_default_data_dir();
    o->bn = "shared";
}

static int parse_bn(const char *s, pfl_bn_mode *mode) {
    if (!strcmp(s, "shared")) *mode = PFL_BN_SHARED;
    else if (!strcmp(s, "local")) *mode = PFL_BN_LOCAL;
    else if (!strcmp(s, "stats-local")) *mode = PFL_BN_STATS_LOCAL;
    else return pfl_err("--bn '%s': expected shared, local or stats-local", s);
    return 0;
}

/* ---- what the run reports ---- */

typedef struct {
    const run_options *o;
    FILE *metrics;
    double best_local, best_global, final_local, final_global, final_local_mean, final_local_std;
    int best_local_round, best_global_round;
    double started;   /* monotonic clock when round 0's evaluation began */
    double elapsed;   /* wall time of the run so far, training and evaluation */
} run_report;

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void format_duration(char *buf, size_t n, double s) {
    if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

static void write_metrics_line(FILE *f, const pfl_round_metrics *m, const pfl_fl *fl) {
    fprintf(f, "{\"round\":%d,\"local_acc\":", m->round);
    pfl_json_number(f, m->local_acc);
    fputs(",\"local_acc_mean\":", f);
    pfl_json_number(f, m->local_acc_mean);
    fputs(",\"local_acc_std\":", f);
    pfl_json_number(f, m->local_acc_std);
    fputs(",\"global_acc\":", f);
    pfl_json_number(f, m->global_acc);
    fputs(",\"train_loss\":", f);
    pfl_json_number(f, m->train_loss);
    fputs(",\"seconds\":", f);
    pfl_json_number(f, m->seconds);
    fputs(",\"eval_seconds\":", f);
    pfl_json_number(f, m->eval_seconds);
    fprintf(f, ",\"train_samples\":%ld,\"clients\":%d", m->train_samples, m->selected);
    if (fl->algo->report) fl->algo->report(fl, f, PFL_REPORT_METRICS); /* FedTSDP */
    fputs("}\n", f);
    fflush(f);
}

static void on_round(const pfl_round_metrics *m, const pfl_fl *fl, void *ctx) {
    run_report *r = ctx;
    if (m->round == 0) r->started = monotonic_seconds() - m->eval_seconds;
    r->elapsed = monotonic_seconds() - r->started;
    const int R = fl->cfg.rounds;
    char eta[32] = "-";
    if (m->round > 0) format_duration(eta, sizeof eta, (r->elapsed / m->round) * (R - m->round));
    if (!m->evaluated) {
        if (!r->o->quiet)
            fprintf(stderr, "[pfl] round %d/%d  trained %d clients  loss %.4f  %.1fs  ETA %s\n", m->round, R,
                    m->selected, m->train_loss, m->seconds, eta);
        return;
    }
    if (m->round > 0) {
        if (!(m->local_acc <= r->best_local)) r->best_local = m->local_acc, r->best_local_round = m->round;
        if (!(m->global_acc <= r->best_global) && isfinite(m->global_acc))
            r->best_global = m->global_acc, r->best_global_round = m->round;
    }
    r->final_local = m->local_acc, r->final_global = m->global_acc;
    r->final_local_mean = m->local_acc_mean, r->final_local_std = m->local_acc_std;
    if (r->metrics) write_metrics_line(r->metrics, m, fl);
    if (r->o->quiet) return;
    fprintf(stderr, "[pfl] round %*d/%d  local %.4f (mean %.4f, std %.4f)  global ", m->round < 10 ? 1 : 0,
            m->round, R, m->local_acc, m->local_acc_mean, m->local_acc_std);
    if (isfinite(m->global_acc)) fprintf(stderr, "%.4f", m->global_acc);
    else fputs("  -   ", stderr);
    if (isfinite(m->train_loss)) fprintf(stderr, "  loss %.4f", m->train_loss);
    if (fl->algo->report) fl->algo->report(fl, stderr, PFL_REPORT_TEXT); /* FedTSDP */
    fprintf(stderr, "  %.1fs+%.1fs eval  ETA %s\n", m->seconds, m->eval_seconds, eta);
}

/* FedALP: its settings, T_pre, Psi per group and layer, and the group of
 * each client (-1: none) as clustered at the end of round T_pre. */
static void write_fedalp_fields(FILE *f, const pfl_fl *fl) {
    const pfl_fedalp_state *s = pfl_fedalp_state_of(fl);
    if (!s) return;
    fprintf(f, ",\n  \"groups\": %d,\n  \"beta\": %g,\n  \"warmup_rounds\": %d,\n  \"clustered\": %s", s->groups,
            (double)s->beta, s->warmup, s->clustered ? "true" : "false");
    fputs(",\n  \"psi\": [", f);
    for (int m = 0; m < s->groups; m++) {
        fputs(m ? ", [" : "[", f);
        for (int l = 0; l < fl->model->num_layers; l++)
            fprintf(f, "%s%.6g", l ? ", " : "", (double)s->psi[(size_t)m * (size_t)fl->model->num_layers + (size_t)l]);
        fputs("]", f);
    }
    fputs("],\n  \"client_groups\": [", f);
    for (int c = 0; c < fl->cfg.clients; c++) fprintf(f, "%s%d", c ? ", " : "", s->group[c]);
    fputs("]", f);
}

/* CFL: its thresholds, the cluster of each client at the end, each cluster's
 * last update norms (to tune the thresholds) and the splits, in order. */
static void write_cfl_fields(FILE *f, const pfl_fl *fl) {
    const pfl_cfl_state *s = pfl_cfl_state_of(fl);
    if (!s) return;
    fprintf(f, ",\n  \"cfl_eps1\": %g,\n  \"cfl_eps2\": %g,\n  \"cfl_warmup\": %d,\n  \"clusters\": %d",
            (double)s->eps1, (double)s->eps2, s->warmup, s->clusters);
    fputs(",\n  \"client_clusters\": [", f);
    for (int c = 0; c < fl->cfg.clients; c++) fprintf(f, "%s%d", c ? ", " : "", s->cluster[c]);
    fputs("],\n  \"cluster_mean_norms\": [", f);
    for (int c = 0; c < s->clusters; c++) fprintf(f, "%s%.6g", c ? ", " : "", s->mean_norm[c]);
    fputs("],\n  \"cluster_max_norms\": [", f);
    for (int c = 0; c < s->clusters; c++) fprintf(f, "%s%.6g", c ? ", " : "", s->max_norm[c]);
    fputs("],\n  \"split_rounds\": [", f);
    for (int k = 0; k < s->num_splits; k++) fprintf(f, "%s%d", k ? ", " : "", s->splits[k].round);
    fputs("],\n  \"splits\": [", f);
    for (int k = 0; k < s->num_splits; k++) {
        const pfl_cfl_split *p = &s->splits[k];
        fprintf(f, "%s{\"round\": %d, \"cluster\": %d, \"new_cluster\": %d, \"size\": %d, \"mean_norm\": %.6g, "
                   "\"max_norm\": %.6g}",
                k ? ", " : "", p->round, p->cluster, p->new_cluster, p->size, p->mean_norm, p->max_norm);
    }
    fputs("]", f);
}

static void write_summary_fields(FILE *f, const run_options *o, const pfl_fl *fl, const run_report *r) {
    char sha[65];
    pfl_sha256_floats_hex(fl->global, pfl_model_vector_len(fl->model), sha); /* parameters and running statistics */
    fputs("{\n  \"algo\": ", f), pfl_json_string(f, o->algo);
    fputs(",\n  \"data\": ", f), pfl_json_string(f, o->data);
    fputs(",\n  \"model\": ", f), pfl_json_string(f, o->model);
    fputs(",\n  \"partition\": ", f), pfl_json_string(f, o->partition);
    fprintf(f, ",\n  \"clients\": %d,\n  \"join\": %g,\n  \"rounds\": %d,\n  \"epochs\": %d,\n  \"batch\": %d", o->clients,
            o->join, o->rounds, o->epochs, o->batch);
    fprintf(f, ",\n  \"lr\": %g,\n  \"momentum\": %g,\n  \"weight_decay\": %g", o->lr, o->momentum, o->weight_decay);
    fprintf(f, ",\n  \"seed\": %llu,\n  \"threads\": %d,\n  \"eval_every\": %d,\n  \"params\": %zu",
            (unsigned long long)o->seed, o->threads, o->eval_every, fl->model->num_params);
    fprintf(f, ",\n  \"state\": %zu", fl->model->num_state); /* BatchNorm running statistics */
    if (fl->model->num_state) fputs(",\n  \"bn\": ", f), pfl_json_string(f, o->bn);
    const pfl_modules_config *mod = &fl->cfg.modules;
    fprintf(f, ",\n  \"modules\": {\"ala\": %s, \"flayer_agg\": %s, \"flayer_lr\": %s, \"flayer_mask\": %s, "
               "\"flayer_mask_literal\": %s}",
            mod->ala ? "true" : "false", mod->flayer_agg ? "true" : "false", mod->flayer_lr ? "true" : "false",
            mod->flayer_mask ? "true" : "false", mod->flayer_mask_literal ? "true" : "false");
    fprintf(f, ",\n  \"mu\": %g,\n  \"lambda\": %g,\n  \"personal_epochs\": %d,\n  \"head_layers\": %d,"
               "\n  \"head_epochs\": %d",
            o->mu, o->lambda, o->personal_epochs, o->head_layers, o->head_epochs);
    if (!strcmp(fl->algo->name, "fedamp") || !strcmp(fl->algo->name, "pfedcfr")) /* fedamp, pfedcfr */
        fprintf(f, ",\n  \"amp_alpha\": %g,\n  \"amp_sigma\": %g,\n  \"amp_lambda\": %g,\n  \"cfr_layers\": %d,"
                   "\n  \"local_steps\": %d",
                o->amp_alpha, o->amp_sigma, o->amp_lambda, o->cfr_layers, o->local_steps);
    write_fedalp_fields(f, fl); /* FedALP */
    if (!strcmp(fl->algo->name, "pfedme")) /* pFedMe */
        fprintf(f, ",\n  \"pfedme_k\": %d,\n  \"pfedme_lambda\": %g,\n  \"pfedme_lr\": %g,\n  \"pfedme_beta\": %g",
                o->pfedme_k, o->pfedme_lambda, o->pfedme_lr, o->pfedme_beta);
    write_cfl_fields(f, fl); /* CFL */
    fprintf(f, ",\n  \"train_fraction\": %g,\n  \"lr_decay\": %g", o->train_fraction, o->lr_decay); /* FedTSDP */
    if (fl->algo->report) fl->algo->report(fl, f, PFL_REPORT_SUMMARY);
    if (mod->ala)
        fprintf(f, ",\n  \"ala_p\": %d,\n  \"ala_s\": %g,\n  \"ala_eta\": %g,\n  \"ala_threshold\": %g", o->ala_p,
                o->ala_s, o->ala_eta, o->ala_threshold);
    fputs(",\n  \"best_local_acc\": ", f), pfl_json_number(f, r->best_local);
    fprintf(f, ",\n  \"best_local_round\": %d", r->best_local_round);
    fputs(",\n  \"final_local_acc\": ", f), pfl_json_number(f, r->final_local);
    fputs(",\n  \"final_local_acc_mean\": ", f), pfl_json_number(f, r->final_local_mean);
    fputs(",\n  \"final_local_acc_std\": ", f), pfl_json_number(f, r->final_local_std);
    fputs(",\n  \"best_global_acc\": ", f), pfl_json_number(f, r->best_global);
    fprintf(f, ",\n  \"best_global_round\": %d", r->best_global_round);
    fputs(",\n  \"final_global_acc\": ", f), pfl_json_number(f, r->final_global);
    fputs(",\n  \"seconds_per_round\": ", f);
    pfl_json_number(f, o->rounds ? fl->train_seconds / o->rounds : NAN);
    fputs(",\n  \"train_samples_per_second\": ", f);
    pfl_json_number(f, fl->train_seconds > 0 ? (double)fl->train_samples / fl->train_seconds : NAN);
    fputs(",\n  \"total_seconds\": ", f), pfl_json_number(f, r->elapsed);
    fprintf(f, ",\n  \"global_model_sha256\": \"%s\"\n}\n", sha);
}

static int write_summary(const run_options *o, const pfl_fl *fl, const run_report *r) {
    char path[4096];
    snprintf(path, sizeof path, "%s/summary.json", o->out);
    pfl_atomic_file a;
    if (pfl_atomic_open(&a, path)) return -1;
    write_summary_fields(a.f, o, fl, r);
    return pfl_atomic_commit(&a);
}

static FILE *open_metrics(const char *out) {
    if (pfl_mkdirs(out)) return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    FILE *f = fopen(path, "w");
    if (!f) pfl_err("%s: cannot write", path);
    return f;
}

/* ---- the command ---- */

/* FedTSDP: --public as a sample count; "test" is the size of the original
 * test files, which the loaders put last (data.h). fedtsdp defaults to it. */
static int public_count(const run_options *o) {
    const char *p = o->public_set ? o->public_set : (!strcmp(o->algo, "fedtsdp") ? "test" : "0");
    if (!strcmp(p, "test")) {
        if (!strcmp(o->data, "mnist") || !strcmp(o->data, "fmnist") || !strcmp(o->data, "cifar10") ||
            !strcmp(o->data, "cifar100") || !strcmp(o->data, "cifar100-coarse") || !strcmp(o->data, "tinyimagenet"))
            return 10000;
        if (!strcmp(o->data, "svhn")) return 26032; /* test_32x32.mat */
        return pfl_err("--public test: the test-file size of %s is not known; give a count", o->data);
    }
    char *end;
    long v = strtol(p, &end, 10);
    if (*p == '\0' || *end != '\0' || v < 0 || v > 100000000)
        return pfl_err("--public '%s': expected a sample count or 'test'", p);
    return (int)v;
}

static int run_experiment(run_options *o) {
    const pfl_algo *algo = pfl_algo_find(o->algo);
    if (!algo) return -1;
    o->flayer_mask |= o->flayer_mask_literal; /* the literal reading is a way of aggregating masks */
    if (!pfl_model_known(o->model))
        return pfl_err("--model: unknown model '%s' (choose from %s)", o->model, pfl_model_names);
    pfl_bn_mode bn = PFL_BN_SHARED;
    if (parse_bn(o->bn, &bn)) return -1;
    pfl_dataset data = {0};
    pfl_partition part = {0};
    pfl_model model;
    pfl_fl fl = {0};
    run_report report = {.o = o, .best_local = NAN, .best_global = NAN};
    int rc = -1;
    /* Fail on an unwritable --out before spending minutes on data and training. */
    if (o->out && !(report.metrics = open_metrics(o->out))) return -1;
    /* FedTSDP: the public set held out of the partition */
    const int holdout = public_count(o);
    if (holdout < 0) goto done;
    if (cli_load_partitioned_split(o->data, o->data_dir, o->partition, o->clients, o->seed, o->quiet,
                                   o->train_fraction, holdout, &data, &part))
        goto done;
    if (pfl_model_build(&model, o->model, data.c, data.h, data.w, data.classes)) goto done;
    pfl_config cfg = {
        .clients = o->clients, .join = o->join, .rounds = o->rounds, .epochs = o->epochs, .batch = o->batch,
        .eval_batch = o->eval_batch, .lr = (float)o->lr, .momentum = (float)o->momentum,
        .weight_decay = (float)o->weight_decay, .seed = o->seed, .threads = o->threads, .eval_every = o->eval_every,
        .algo = {.mu = (float)o->mu, .lambda = (float)o->lambda, .personal_epochs = o->personal_epochs,
                 .head_layers = o->head_layers, .head_epochs = o->head_epochs,
                 /* fedamp, pfedcfr */
                 .amp_alpha = (float)o->amp_alpha, .amp_sigma = (float)o->amp_sigma,
                 .amp_lambda = (float)o->amp_lambda, .cfr_layers = o->cfr_layers, .local_steps = o->local_steps},
        .modules = {o->ala, o->ala_p, (float)o->ala_s, (float)o->ala_eta, (float)o->ala_threshold, o->ala_max_epochs,
                    o->flayer_agg, o->flayer_lr, o->flayer_mask, o->flayer_mask_literal},
    };
    /* FedALP */
    cfg.algo.groups = o->groups, cfg.algo.beta = (float)o->beta, cfg.algo.warmup = o->warmup;
    /* pFedMe, CFL */
    cfg.algo.pfedme_k = o->pfedme_k, cfg.algo.pfedme_lambda = (float)o->pfedme_lambda;
    cfg.algo.pfedme_lr = (float)o->pfedme_lr, cfg.algo.pfedme_beta = (float)o->pfedme_beta;
    cfg.algo.cfl_eps1 = (float)o->cfl_eps1, cfg.algo.cfl_eps2 = (float)o->cfl_eps2, cfg.algo.cfl_warmup = o->cfl_warmup;
    /* FedTSDP */
    cfg.lr_decay = (float)o->lr_decay;
    cfg.algo.tsdp_public = holdout, cfg.algo.tsdp_public_batch = o->public_batch;
    cfg.algo.tsdp_eps1 = (float)o->tsdp_eps1, cfg.algo.tsdp_eps2 = (float)o->tsdp_eps2;
    cfg.algo.tsdp_min_pts = o->tsdp_min_pts, cfg.algo.tsdp_h_th = (float)o->tsdp_h_th;
    cfg.algo.tsdp_psi = (float)o->tsdp_psi, cfg.algo.tsdp_shared = o->tsdp_shared;
    cfg.algo.tsdp_hopkins_m = o->tsdp_hopkins_m;
    cfg.bn = bn;
    if (pfl_fl_create(&fl, &cfg, &model, &data, &part, algo)) goto done;
    if (!o->quiet)
        fprintf(stderr, "[pfl] %s on %s, model %s (%zu parameters), %d clients, join %g, %d rounds, %d threads\n",
                algo->name, data.name, model.name, model.num_params, o->clients, o->join, o->rounds, o->threads);
    if (pfl_fl_run(&fl, on_round, &report)) goto done;
    if (o->out && write_summary(o, &fl, &report)) goto done;
    if (!o->quiet) {
        fprintf(stderr, "[pfl] done: final local %.4f, best local %.4f (round %d)", report.final_local,
                report.best_local, report.best_local_round);
        if (isfinite(report.final_global)) fprintf(stderr, ", final global %.4f", report.final_global);
        fprintf(stderr, ", %.1f s/round, %.0f train samples/s\n", o->rounds ? fl.train_seconds / o->rounds : 0.0,
                fl.train_seconds > 0 ? fl.train_samples / fl.train_seconds : 0.0);
        const pfl_cfl_state *cfl = pfl_cfl_state_of(&fl); /* CFL: the clusters it found */
        if (cfl) {
            fprintf(stderr, "[pfl] cfl: %d cluster%s, client clusters [", cfl->clusters, cfl->clusters == 1 ? "" : "s");
            for (int c = 0; c < o->clients; c++) fprintf(stderr, "%s%d", c ? " " : "", cfl->cluster[c]);
            fputs("], splits at rounds [", stderr);
            for (int k = 0; k < cfl->num_splits; k++) fprintf(stderr, "%s%d", k ? " " : "", cfl->splits[k].round);
            fputs("]\n", stderr);
        }
        if (o->out) fprintf(stderr, "[pfl] wrote %s/metrics.jsonl and %s/summary.json\n", o->out, o->out);
    }
    rc = 0;
done:
    if (report.metrics) fclose(report.metrics);
    pfl_fl_destroy(&fl);
    pfl_partition_free(&part);
    pfl_dataset_free(&data);
    return rc;
}

int cmd_run(int argc, char **argv) {
    run_options o;
    default_options(&o);
    arg_spec specs[MAX_RUN_FLAGS];
    int n = run_specs(&o, specs);
    int parsed = args_parse(specs, n, argc, argv, run_usage);
    if (parsed == 1) return 0;
    if (parsed < 0 || run_experiment(&o)) {
        fprintf(stderr, "pfl run: %s\n", pfl_errmsg());
        return parsed < 0 ? 2 : 1;
    }
    return 0;
}
