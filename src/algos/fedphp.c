/* FedPHP (Li, Zhan, Shao, Li, Song, ECML PKDD 2021, "Federated
 * Personalization with Inherited Private Models"). Each client keeps an
 * inherited private model (HPM), "a temporal ensembling of its historical
 * personalized models", and uses it "to supervise the personalization
 * process in the next global round":
 *
 *  - local training starts from the global model (with --ala or
 *    --flayer-agg: the module's mix of the global model and the HPM) and
 *    minimizes (1 - lambda) CE + lambda MMD(z, z_hpm), z the features the
 *    model gives a batch below its last layer and z_hpm those of the HPM
 *    (PFLlib's MMD with its Gaussian kernels, the loss of the FedALA
 *    setting; pfl_mmd_rbf);
 *  - after training, HPM <- mu_k HPM + (1 - mu_k) w, w the trained model,
 *    with mu_k = min(mu x tau_k / max(floor(join x rounds), 1), mu), tau_k
 *    the rounds client k trained before this one (the authors' code,
 *    lxcnju/FedRepo: mu grows linearly with a client's participations up to
 *    mu = 0.9);
 *  - the upload is w, aggregated as FedAvg; the personalized model is the
 *    HPM, which the broadcast leaves alone (without a module).
 *
 * The participation counts are the method's state (checkpointed); the HPM
 * is the client's model. docs/algorithms.md has the readings. */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "nn/layers.h"
#include "util/err.h"

typedef struct {
    int *participations; /* per client: rounds it trained in before the current one */
} fedphp_state;

/* The features the MMD compares: those entering the last layer (PFLlib's
 * model.base(x), the base under a one-layer head). */
static int feature_layer(const pfl_model *m) { return m->num_layers - 1; }

static int fedphp_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    if (m->num_layers < 2)
        return pfl_err("fedphp: model %s has one layer, so no features below its last layer for the MMD term",
                       m->name);
    fedphp_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    return (s->participations = pfl_calloc((size_t)fl->cfg.clients, sizeof(int))) ? 0 : -1;
}

static void fedphp_destroy(pfl_fl *fl) {
    fedphp_state *s = fl->algo_state;
    free(s->participations);
    free(s);
    fl->algo_state = NULL;
}

/* Without a module training starts from the global model, not the HPM (the
 * client's state); with one, from the module's mix. */
static void fedphp_init(pfl_fl *fl, int client, float *model) {
    const pfl_modules_config *mod = &fl->cfg.modules;
    if (mod->ala || mod->flayer_agg) pfl_default_local_init(fl, client, model);
    else memcpy(model, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
}

/* MMD(z, z_hpm) and its gradient with respect to z. */
static double mmd_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)ctx, (void)correct;
    return pfl_mmd_rbf(b->z, b->refs[0], b->B, b->n, dz);
}

/* (1 - lambda) CE + lambda MMD(z, z_hpm), the HPM a fixed teacher (evaluation mode). */
static void fedphp_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const float lambda = fl->cfg.algo.php_lambda;
    pfl_step s = pfl_step_default(fl);
    s.ce_weight = 1.0 - (double)lambda;
    const pfl_loss_term mmd = {.name = "fedphp's MMD toward the inherited model",
                               .at = feature_layer(fl->model),
                               .weight = lambda,
                               .refs = {pfl_client_model(fl, client)},
                               .num_refs = 1,
                               .value = mmd_term};
    pfl_step_add_term(&s, &mmd);
    pfl_step_run(fl, client, w, model, &s, stats);
}

float pfl_fedphp_mu(const pfl_fl *fl, int participations) {
    const float top = fl->cfg.algo.php_mu;
    int expected = (int)(fl->cfg.join * fl->cfg.rounds);
    if (expected < 1) expected = 1;
    const float mu = top * (float)participations / (float)expected;
    return mu < top ? mu : top;
}

/* HPM <- mu HPM + (1 - mu) w, parameters and running statistics alike. */
static void fedphp_finish(pfl_fl *fl, int client, const float *model, float *state) {
    fedphp_state *s = fl->algo_state;
    const float mu = pfl_fedphp_mu(fl, s->participations[client]);
    const size_t V = pfl_model_vector_len(fl->model);
    for (size_t i = 0; i < V; i++) state[i] = mu * state[i] + (1.0f - mu) * model[i];
}

/* The server counts who trained (their uploads arrived), so every process
 * holds every count (MPI: the clients' homes are elsewhere). */
static void fedphp_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    fedphp_state *s = fl->algo_state;
    pfl_default_aggregate(fl, clients, n, uploads);
    for (int k = 0; k < n; k++) s->participations[clients[k]]++;
}

static int fedphp_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fedphp_state *s = fl->algo_state;
    return pfl_ckpt_put_i32(w, "fedphp.participations", s->participations, (size_t)fl->cfg.clients);
}

static int fedphp_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fedphp_state *s = fl->algo_state;
    if (pfl_ckpt_get_i32(r, "fedphp.participations", s->participations, (size_t)fl->cfg.clients)) return -1;
    /* a count outside [0, rounds] would give a moving-average weight outside [0, mu] */
    for (int c = 0; c < fl->cfg.clients; c++)
        if (s->participations[c] < 0 || s->participations[c] > fl->cfg.rounds)
            return pfl_err("%s: fedphp: client %d trained in %d rounds (of %d)", r->path, c, s->participations[c],
                           fl->cfg.rounds);
    return 0;
}

/* FedALA's appendix: "For FedPHP, we set the coefficient mu=0.9 ... and
 * lambda=0.01". */
static const pfl_param fedphp_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "php-mu", php_mu), .def = 0.9, .max = 1, .metavar = "F",
     .help = "largest moving-average weight of the inherited private model (reached after join x rounds rounds)"},
    {PFL_ALGO_PARAM(FLOAT, "php-lambda", php_lambda), .def = 0.01, .max = 1, .metavar = "F",
     .help = "weight of the MMD term toward the inherited model's features"},
};

const pfl_algo pfl_algo_fedphp = {
    .name = "fedphp",
    .description = "FedPHP: inherited private model (moving average of local models) distilled by MMD (--php-*)",
    PFL_PARAMS(fedphp_params),
    .has_global = true,
    .stateful = true,
    .keeps_state = true,
    .create = fedphp_create,
    .destroy = fedphp_destroy,
    .local_init = fedphp_init,
    .local_train = fedphp_train,
    .finish = fedphp_finish,
    .aggregate = fedphp_aggregate,
    .save = fedphp_save,
    .load = fedphp_load,
};
