/* FedAMP (Huang et al., AAAI 2021, "Personalized cross-silo federated
 * learning on non-IID data"): each client i keeps its model w_i (its state,
 * untouched by the broadcast) and the server keeps a personalized cloud model
 * u_i per client (N model vectors, inherent to the method, held in a
 * per-client store: u_i of a client never fused is the initial model and
 * costs nothing, and --client-state puts them in a file). After the
 * round's uploads the server passes messages on whole models (Eq. 6,
 * src/algos/amp.c):
 *
 *   u_i = (1 - alpha sum_{j!=i} A'(||w_i - w_j||^2)) w_i + alpha sum_{j!=i} A'(..) w_j
 *
 * over the clients that uploaded this round (u of the others is unchanged).
 * The client then minimizes F_i(w) + lambda/(2 alpha) ||w - u_i||^2 starting
 * from its own w_i, as PFLlib's clientAMP does (the received u_i only goes
 * into client_u, the anchor of the proximal term); --local-steps K makes each
 * of the --epochs K batches. The personalized model evaluated is w_i
 * (PFLlib evaluates self.model); FedAMP has no global model (has_global
 * false: no global accuracy). Before round 1, u_i = w_i = the initial model.
 * What the server sends client i is u_i (fedamp_receive): the local-init
 * modules (--ala, --flayer-agg) mix it with w_i and training starts from the
 * mix; --flayer-mask is refused (the fusion reads whole uploads). */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/amp.h"
#include "util/err.h"

typedef struct {
    pfl_store *u;  /* per client its personalized cloud model (a model vector); the run frees it */
    double *xi;    /* scratch weights between the round's clients */
    float **out;   /* scratch pointers, one per client of a round */
    bool warned;
} fedamp_state;

static int fedamp_create(pfl_fl *fl) {
    const int N = fl->cfg.clients;
    const size_t P = pfl_model_vector_len(fl->model); /* u_i are whole vectors; only parameters are fused */
    if (!(fl->cfg.algo.amp_alpha > 0.0f) || !(fl->cfg.algo.amp_sigma > 0.0f))
        return pfl_err("fedamp: --amp-alpha and --amp-sigma must be > 0");
    if (fl->cfg.modules.flayer_mask)
        return pfl_err("fedamp: --flayer-mask is not supported (message passing compares and fuses whole client "
                       "models; a masked upload leaves the unsent elements unknown)");
    fedamp_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    const size_t n = (size_t)pfl_clients_per_round(&fl->cfg); /* the most uploads a round fuses */
    if (!(s->u = pfl_fl_store(fl, "fedamp-u", N, P, fl->global)) || !(s->xi = pfl_malloc(sizeof(double) * n * n)) ||
        !(s->out = pfl_calloc(n, sizeof(float *))))
        return -1;
    return 0;
}

static void fedamp_destroy(pfl_fl *fl) {
    fedamp_state *s = fl->algo_state;
    free(s->xi);
    free(s->out);
    free(s);
    fl->algo_state = NULL;
}

const float *pfl_fedamp_cloud_model(const pfl_fl *fl, int client) {
    const fedamp_state *s = fl->algo_state;
    return pfl_store_read(s->u, client);
}

/* What the server sends client i: its cloud model u_i, the anchor of its
 * proximal term. Without a local-init module the client keeps training its
 * own w_i (keeps_state); with --ala or --flayer-agg the module mixes u_i with
 * w_i. Running statistics are never fused: the client's own stay. */
static void fedamp_receive(pfl_fl *fl, int client, const float *state, float *received) {
    const size_t P = fl->model->num_params;
    memcpy(received, pfl_fedamp_cloud_model(fl, client), P * sizeof(float));
    memcpy(received + P, state + P, fl->model->num_state * sizeof(float));
}

static void fedamp_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_algo_params *a = &fl->cfg.algo;
    pfl_step s = pfl_step_default(fl);
    /* lambda/alpha toward u_i on every layer (Eq. 8) */
    pfl_step_add_prox(&s, a->amp_lambda / a->amp_alpha, pfl_fedamp_cloud_model(fl, client), 0,
                      pfl_model_backbone_params(fl->model));
    pfl_step_run(fl, client, w, model, &s, stats);
}

static void fedamp_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    fedamp_state *s = fl->algo_state;
    const size_t P = fl->model->num_params;
    for (int k = 0; k < n; k++)
        if (!(s->out[k] = pfl_store_write(s->u, clients[k]))) return; /* no room: the round fails */
    /* distances and fusion on the trained parameters; u_i only anchors the
     * proximal term, and each client keeps its own running statistics */
    int rescaled = pfl_amp_fuse(s->out, (const float *const *)uploads, n, 0, P, fl->cfg.algo.amp_alpha,
                                fl->cfg.algo.amp_sigma, s->xi);
    for (int k = 0; k < n; k++) pfl_store_release(s->u, clients[k]);
    pfl_amp_warn_rescaled(fl, &s->warned, "fedamp", rescaled);
}

/* Checkpoints: the cloud models u_i fused so far (whole vectors), and whether the warning was given. */
static int fedamp_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fedamp_state *s = fl->algo_state;
    return pfl_store_save(s->u, w, "fedamp.u") || pfl_ckpt_put_bool(w, "fedamp.warned", &s->warned, 1) ? -1 : 0;
}

static int fedamp_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fedamp_state *s = fl->algo_state;
    return pfl_store_load(s->u, r, "fedamp.u") || pfl_ckpt_get_bool(r, "fedamp.warned", &s->warned, 1) ? -1 : 0;
}

/* FedALA's appendix, which sets the baselines of FedALA's and FLAYER's
 * tables: "For FedAMP, we set the step size of gradient descent alpha_k to
 * 1000 ..., the regularization parameter lambda to 1 ... and the parameter
 * for attention-inducing function sigma to 0.1". pFedCFR's Table II runs
 * FedAMP with alpha 1e4, sigma 1e6 (bench/paper_tables.sh passes them). */
static const pfl_param fedamp_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "amp-alpha", amp_alpha), .def = 1000, .max = 1e12, .min_exclusive = true, .metavar = "F",
     .help = "message-passing weight alpha_k (xi_ij = alpha exp(-d/sigma)/sigma)"},
    {PFL_ALGO_PARAM(FLOAT, "amp-sigma", amp_sigma), .def = 0.1, .max = 1e12, .min_exclusive = true, .metavar = "F",
     .help = "sigma of the attention-inducing function A(x) = 1 - exp(-x/sigma)"},
    {PFL_ALGO_PARAM(FLOAT, "amp-lambda", amp_lambda), .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "lambda: proximal coefficient lambda/alpha toward the cloud model u_i"},
};

const pfl_algo pfl_algo_fedamp = {
    .name = "fedamp",
    .description = "FedAMP: attentive message passing on whole models, proximal term lambda/alpha toward u_i "
                   "(--amp-alpha, --amp-sigma, --amp-lambda)",
    PFL_PARAMS(fedamp_params),
    .has_global = false,
    .stateful = true,
    .keeps_state = true,
    .create = fedamp_create,
    .destroy = fedamp_destroy,
    .receive = fedamp_receive,
    .local_train = fedamp_train,
    .whole_uploads = true, /* MPI: its aggregate reads whole uploads */
    .aggregate = fedamp_aggregate,
    .save = fedamp_save,
    .load = fedamp_load,
};
