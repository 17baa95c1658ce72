/* FedPHP (Li, Zhan, Shao, Li, Song, ECML PKDD 2021, "Federated
 * Personalization with Inherited Private Models"). Each client trains from
 * the global model on (1 - lambda) CE + lambda MMD(z, z_t), z the features
 * the model gives a batch below its last layer and z_t a teacher's (PFLlib's
 * MMD with its Gaussian kernels, pfl_mmd_rbf); the upload is the trained
 * model w, aggregated as FedAvg. The two readings (--reading,
 * docs/algorithms.md) differ in the teacher, what a client keeps and the
 * model scored:
 *
 *  - pfllib (the default; PFLlib's clientphp.py as FedALA's tables ran it):
 *    the client keeps its trained model S; at the broadcast of round r it
 *    holds M_r = (1 - mu_r) G + mu_r S, G the global model, mu_r = mu (r -
 *    1) / rounds, parameters only (the running statistics are S's); it is
 *    scored on M_r and trains from it, the teacher being G in training mode.
 *  - paper: each client keeps an inherited private model (HPM), "a temporal
 *    ensembling of its historical personalized models", which supervises
 *    training (the teacher, in evaluation mode) and is the model scored;
 *    after training HPM <- mu_k HPM + (1 - mu_k) w, mu_k = min(mu x tau_k /
 *    max(floor(join x rounds), 1), mu), tau_k the rounds client k trained
 *    before this one (the authors' code, lxcnju/FedRepo).
 *
 * With --ala or --flayer-agg the module's mix of the global model and the
 * client's model is what it holds and trains from, in both readings. The
 * participation counts are the method's state (checkpointed); S or the HPM
 * is the client's model. */
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

static bool module_on(const pfl_fl *fl) { return fl->cfg.modules.ala || fl->cfg.modules.flayer_agg; }

/* The global model as the client holds it: what --bn keeps local is its own (from `own`). */
static void global_as_held(const pfl_fl *fl, const float *own, float *out) {
    memcpy(out, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
    pfl_keep_local_bn(fl, own, out);
}

float pfl_fedphp_pfllib_mu(const pfl_fl *fl, int round) {
    const int R = fl->cfg.rounds > 0 ? fl->cfg.rounds : 1;
    return fl->cfg.algo.php_mu * (float)(round - 1) / (float)R;
}

/* --reading pfllib: the model a client holds for round `round`, (1 - mu_r) G + mu_r S over the parameters
 * (PFLlib's set_parameters mixes parameters()), the running statistics S's. */
static void pfllib_mix(const pfl_fl *fl, const float *S, int round, float *out) {
    const float mu = pfl_fedphp_pfllib_mu(fl, round);
    const size_t P = fl->model->num_params, V = pfl_model_vector_len(fl->model);
    global_as_held(fl, S, out);
    for (size_t i = 0; i < P; i++) out[i] = out[i] * (1.0f - mu) + S[i] * mu;
    memcpy(out + P, S + P, (V - P) * sizeof(float));
}

/* Training starts from the module's mix when one is on; else from the global model (paper: not the HPM,
 * the client's state) or the pfllib mix of round `round`. */
static void fedphp_init(pfl_fl *fl, int client, float *model) {
    if (module_on(fl)) pfl_default_local_init(fl, client, model);
    else if (pfl_reading_paper(&fl->cfg)) memcpy(model, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
    else pfllib_mix(fl, pfl_client_model(fl, client), fl->round, model);
}

/* MMD(z, z_hpm) and its gradient with respect to z. */
static double mmd_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)ctx, (void)correct;
    return pfl_mmd_rbf(b->z, b->refs[0], b->B, b->n, dz);
}

/* (1 - lambda) CE + lambda MMD(z, z_t): the teacher is the HPM, fixed (evaluation mode; paper), or the global
 * model as the client holds it, run in training mode as PFLlib's model_s (pfllib; in the worker's `received`
 * buffer, free while it trains). */
static void fedphp_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const float lambda = fl->cfg.algo.php_lambda;
    const bool paper = pfl_reading_paper(&fl->cfg);
    float *own = pfl_client_model(fl, client);
    if (!own) return; /* no room: the store's error fails the round */
    if (!paper) global_as_held(fl, own, w->received);
    pfl_step s = pfl_step_default(fl);
    s.ce_weight = 1.0 - (double)lambda;
    const pfl_loss_term mmd = {.name = paper ? "fedphp's MMD toward the inherited model" : "fedphp's MMD toward the global model",
                               .at = feature_layer(fl->model),
                               .weight = lambda,
                               .refs = {paper ? own : w->received},
                               .num_refs = 1,
                               .refs_train = !paper,
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

/* paper: HPM <- mu HPM + (1 - mu) w, parameters and running statistics alike; pfllib: S <- w. */
static void fedphp_finish(pfl_fl *fl, int client, const float *model, float *state) {
    fedphp_state *s = fl->algo_state;
    const size_t V = pfl_model_vector_len(fl->model);
    if (pfl_reading_paper(&fl->cfg)) {
        const float mu = pfl_fedphp_mu(fl, s->participations[client]);
        for (size_t i = 0; i < V; i++) state[i] = mu * state[i] + (1.0f - mu) * model[i];
    } else {
        memcpy(state, model, V * sizeof(float));
    }
}

/* The server counts who trained (their uploads arrived), so every process
 * holds every count (MPI: the clients' homes are elsewhere). */
static void fedphp_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    fedphp_state *s = fl->algo_state;
    pfl_default_aggregate(fl, clients, n, uploads);
    for (int k = 0; k < n; k++) s->participations[clients[k]]++;
}

/* The model scored: the HPM (paper) or the module's mix, the client's state; else (pfllib) the mix it holds
 * for the next round. */
static const float *fedphp_personal_model(pfl_fl *fl, int client, float *scratch) {
    const float *state = pfl_default_personal_model(fl, client, scratch);
    if (pfl_reading_paper(&fl->cfg) || module_on(fl)) return state;
    pfllib_mix(fl, state, fl->round + 1, scratch);
    return scratch;
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
     .help = "weight of the MMD term toward the teacher's features"},
    PFL_READING_PARAM("pfllib: a client holds, is scored on and trains from (1 - mu r/R) global + (mu r/R) its "
                      "last trained model, the global model the teacher (clientphp.py as FedALA ran it) | paper: "
                      "the inherited private model, a moving average of trained models, is the teacher and is scored"),
};

static int fedphp_check(const pfl_config *cfg) { return pfl_check_reading(cfg); }

const pfl_algo pfl_algo_fedphp = {
    .name = "fedphp",
    .description = "FedPHP: a private model (PFLlib: a mix of global and last local model; paper: a moving average "
                   "of local models) and MMD toward a teacher's features (--php-*, --reading)",
    PFL_PARAMS(fedphp_params),
    .has_global = true,
    .stateful = true,
    .keeps_state = true,
    .create = fedphp_create,
    .check = fedphp_check,
    .destroy = fedphp_destroy,
    .local_init = fedphp_init,
    .local_train = fedphp_train,
    .finish = fedphp_finish,
    .personal_model = fedphp_personal_model,
    .aggregate = fedphp_aggregate,
    .save = fedphp_save,
    .load = fedphp_load,
};
