/* PartialFed (Sun et al., NeurIPS 2021, "PartialFed: Cross-Domain
 * Personalized Federated Learning via Partial Initialization"), its
 * adaptive strategy, with FedALA's appendix settings ("we initialize the
 * temperature parameter tau=5.0 and anneal it to 0 with the decay rate of
 * 0.965, based on the original paper. Besides, we set the updating
 * frequency f_m=8, f_s=2").
 *
 * FedAvg's server. Each client keeps its model and a strategy: per layer two
 * logits, (load the global layer, keep its own). Before training (and to be
 * evaluated) a client builds its model layer by layer from the global model
 * and its own, as the strategy's more likely choice says (its partial
 * initialization; the personalized model). Local training takes the round's batches in turns:
 * f_m batches of SGD on the model, then f_s batches that train the strategy
 * (the samples of the two never overlap): a binary choice per layer is drawn
 * by Gumbel-softmax at the round's temperature tau_0 * decay^(r-1), the model
 * is rebuilt from the global layers and its own by that choice, and the
 * logits take a step on the loss through the relaxed choice (straight-
 * through). The client uploads its whole model. docs/algorithms.md has the
 * readings and choices. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/partialfed.h"
#include "util/err.h"

typedef struct {
    pfl_store *logits; /* per client: layers x 2 floats, (load global, keep own); in a store (src/fl/store.h),
                        * which the run frees */
} partialfed_state;

static int partialfed_check(const pfl_config *cfg) {
    if (cfg->algo.pf_fm + cfg->algo.pf_fs < 1)
        return pfl_err("--pf-fm %d --pf-fs %d: a cycle of no batches", cfg->algo.pf_fm, cfg->algo.pf_fs);
    return 0;
}

static int partialfed_create(pfl_fl *fl) {
    partialfed_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    /* zero logits: both choices equally likely; the first initialization loads the global model */
    const size_t len = (size_t)fl->model->num_layers * 2;
    float *zeros = pfl_calloc(len, sizeof(float));
    s->logits = zeros ? pfl_fl_store(fl, "partialfed-logits", fl->cfg.clients, len, zeros)
                      : NULL;
    free(zeros);
    return s->logits ? 0 : -1;
}

static void partialfed_destroy(pfl_fl *fl) {
    free(fl->algo_state);
    fl->algo_state = NULL;
}

const float *pfl_partialfed_logits(const pfl_fl *fl, int client) {
    const partialfed_state *s = fl->algo_state;
    return pfl_store_read(s->logits, client);
}

float pfl_partialfed_tau(const pfl_fl *fl) {
    const pfl_algo_params *a = &fl->cfg.algo;
    const int r = fl->round > 1 ? fl->round - 1 : 0;
    return (float)((double)a->pf_tau * pow((double)a->pf_tau_decay, (double)r));
}

/* Layer l of `out` (parameters and running statistics) from `global` when load[l], else from `own`. */
void pfl_partialfed_build(const pfl_model *m, const bool *load, const float *global, const float *own, float *out) {
    for (int l = 0; l < m->num_layers; l++) {
        const pfl_layer *ly = &m->layers[l];
        const float *from = load[l] ? global : own;
        if (from == out) continue; /* already there (the partial initialization builds over the client's model) */
        memcpy(out + ly->offset, from + ly->offset, sizeof(float) * ly->length);
        if (ly->state_length > 0)
            memcpy(out + ly->state_offset, from + ly->state_offset, sizeof(float) * ly->state_length);
    }
}

/* The partial initialization into `out`: per layer, the strategy's more likely choice (loading the
 * global layer on a tie) between the global model and the client's own. The server sends the
 * global model (so --ala mixes that with the client's model, and the strategy then chooses
 * between the global layers and ALA's, as FedALA describes ALA on PartialFed); the client keeps
 * its own model between rounds and initializes from the two. */
static const float *partial_init(pfl_fl *fl, int client, float *out) {
    const float *own = pfl_client_model_get(fl, client, out);
    const float *z = pfl_partialfed_logits(fl, client);
    bool load[PFL_MAX_LAYERS];
    for (int l = 0; l < fl->model->num_layers; l++) load[l] = z[2 * l] >= z[2 * l + 1];
    if (own != out) memcpy(out, own, sizeof(float) * pfl_model_vector_len(fl->model)); /* nothing else outside the layers */
    pfl_partialfed_build(fl->model, load, fl->global, out, out);
    if (own != out) pfl_keep_local_bn(fl, own, out); /* a loaded BatchNorm layer keeps what --bn keeps local */
    return out;
}

static void partialfed_init(pfl_fl *fl, int client, float *model) { partial_init(fl, client, model); }

/* Its personalized model: the partial initialization from the global model it holds now. */
static const float *partialfed_personal(pfl_fl *fl, int client, float *scratch) {
    return partial_init(fl, client, scratch);
}

void pfl_partialfed_strategy_step(pfl_fl *fl, pfl_worker *w, const float *model, float *logits, float tau, pfl_rng *gumbel,
                                  float *loss, int *correct) {
    const pfl_model *m = fl->model;
    pfl_exec *x = w->exec;
    const int L = m->num_layers;
    bool load[PFL_MAX_LAYERS];
    double y_load[PFL_MAX_LAYERS];
    for (int l = 0; l < L; l++) {
        /* Gumbel(0, 1) noise g = -log(-log u), u in (0, 1); y = softmax((z + g) / tau) */
        double g[2];
        for (int k = 0; k < 2; k++) g[k] = -log(-log(pfl_rng_uniform(gumbel) + 0x1.0p-54)); /* u in (0, 1) */
        const double a = ((double)logits[2 * l] + g[0]) / tau, b = ((double)logits[2 * l + 1] + g[1]) / tau;
        y_load[l] = 1.0 / (1.0 + exp(b - a));
        load[l] = a >= b; /* the hard sample: argmax, loading on a tie */
    }
    /* the global model as the client holds it (what --bn keeps local is its own), in `received`, free while
     * it trains */
    float *mix = w->aux, *grads = pfl_exec_host(&w->aux_grads), *global = w->received;
    memcpy(global, fl->global, sizeof(float) * pfl_model_vector_len(m));
    pfl_keep_local_bn(fl, model, global);
    pfl_partialfed_build(m, load, global, model, mix);
    pfl_xbuf mix_v = pfl_exec_view(x, mix, pfl_model_vector_len(m), false);
    pfl_exec_zero(x, &w->aux_grads, 0, m->num_params);
    pfl_exec_forward(x, &mix_v, true, NULL);
    *loss = pfl_exec_xent(x, NULL);
    *correct = pfl_exec_correct(x);
    pfl_exec_backward(x, &mix_v, &w->aux_grads, 0, 1.0f, NULL, 0);
    pfl_exec_unview(x, &mix_v);
    /* straight-through: the layer is y_load global + (1 - y_load) own, so dL/dy_load = <g, global - own>;
     * through the softmax, dL/dz_load = y_load (1 - y_load) / tau * dL/dy_load = -dL/dz_own */
    const double lr = fl->cfg.algo.pf_lr;
    for (int l = 0; l < L; l++) {
        const size_t off = m->layers[l].offset, end = off + m->layers[l].length;
        double dy = 0.0;
        for (size_t i = off; i < end; i++) dy += (double)grads[i] * ((double)global[i] - (double)model[i]);
        const double dz = y_load[l] * (1.0 - y_load[l]) / tau * dy;
        logits[2 * l] = (float)((double)logits[2 * l] - lr * dz);
        logits[2 * l + 1] = (float)((double)logits[2 * l + 1] + lr * dz);
    }
}

typedef struct {
    float *logits;
    float tau;
    pfl_rng gumbel;
} partialfed_batch;

/* Of every f_m + f_s batches, the first f_m are the step's SGD on the model, the last f_s train the
 * strategy (the method's own work on host memory). */
static bool partialfed_strategy_batch(void *ctx, pfl_owned_batch *b) {
    partialfed_batch *p = ctx;
    const pfl_algo_params *a = &b->fl->cfg.algo;
    if (b->index % (a->pf_fm + a->pf_fs) < a->pf_fm) return false;
    pfl_exec_gather(b->x, b->idx, b->B);
    float loss;
    int correct;
    pfl_partialfed_strategy_step(b->fl, b->w, pfl_exec_host(b->model), p->logits, p->tau, &p->gumbel, &loss, &correct);
    pfl_step_count(b, loss, correct, b->B);
    return true;
}

static void partialfed_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const partialfed_state *s = fl->algo_state;
    partialfed_batch p = {pfl_store_write(s->logits, client), pfl_partialfed_tau(fl),
                          pfl_rng_stream(fl->cfg.seed, fl->round, client, PFL_RNG_ALGO)};
    if (!p.logits) return; /* the store's error fails the round */
    pfl_step step = pfl_step_default(fl);
    step.own = partialfed_strategy_batch, step.own_ctx = &p;
    pfl_step_run(fl, client, w, model, &step, stats);
}

static int partialfed_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const partialfed_state *s = fl->algo_state;
    return pfl_store_save(s->logits, w, "partialfed.logits");
}

static int partialfed_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    partialfed_state *s = fl->algo_state;
    return pfl_store_load(s->logits, r, "partialfed.logits");
}

/* FedALA's appendix: "For PartialFed, we initialize the temperature parameter tau=5.0 and anneal it
 * to 0 with the decay rate of 0.965, based on the original paper. Besides, we set the updating
 * frequency f_m=8, f_s=2". It gives no learning rate for the strategy: --pf-lr is pfl's
 * (docs/algorithms.md). */
static const pfl_param partialfed_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "pf-tau", pf_tau), .def = 5.0, .max = 1e6, .min_exclusive = true, .metavar = "F",
     .help = "Gumbel-softmax temperature in round 1"},
    {PFL_ALGO_PARAM(FLOAT, "pf-tau-decay", pf_tau_decay), .def = 0.965, .max = 1, .min_exclusive = true,
     .metavar = "F", .help = "round r draws at tau x decay^(r-1)"},
    {PFL_ALGO_PARAM(INT, "pf-fm", pf_fm), .def = 8, .max = 1e6, .metavar = "K",
     .help = "f_m: batches of model training in each turn"},
    {PFL_ALGO_PARAM(INT, "pf-fs", pf_fs), .def = 2, .max = 1e6, .metavar = "K",
     .help = "f_s: batches of strategy training in each turn, after those"},
    {PFL_ALGO_PARAM(FLOAT, "pf-lr", pf_lr), .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "learning rate of the strategy's logits (FedALA gives none; pfl's choice)"},
};

const pfl_algo pfl_algo_partialfed = {
    .name = "partialfed",
    .description = "PartialFed: each layer loaded from the global model or kept, by a per-client strategy "
                   "learned with Gumbel-softmax (--pf-tau, --pf-tau-decay, --pf-fm, --pf-fs, --pf-lr)",
    PFL_PARAMS(partialfed_params),
    .has_global = true,
    .stateful = true,
    .create = partialfed_create,
    .check = partialfed_check,
    .destroy = partialfed_destroy,
    .keeps_state = true, /* the client's own model; the partial initialization is its local init */
    .local_init = partialfed_init,
    .personal_model = partialfed_personal,
    .local_train = partialfed_train,
    .save = partialfed_save,
    .load = partialfed_load,
};
