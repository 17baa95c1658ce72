/* APPLE (Luo & Wu, IJCAI 2022, "Adapt to Adaptation: Learning
 * Personalization for Cross-Silo Federated Learning"), with FedALA's
 * appendix settings ("the loss scheduler type to 'cos', directed
 * relationship (DR) learning rate eta_2=0.01, mu=0.1, L=0.2 and the number
 * of received local models M to the total number of clients"); the
 * authors' code is ljaiverson/pFL-APPLE, PFLlib's clientapple.py (which
 * FedALA's and FLAYER's tables ran) another reading.
 *
 * Every client i keeps a core model c_i (the server holds every client's
 * latest core) and a directed-relationship vector p_i over the clients. Its
 * model is w_i = sum_j p_ij c_j. Every round every client downloads all
 * cores and trains, per batch: forward and backward on w_i (the gradient
 * g), then
 *
 *   c_i  <- c_i  - lr * s * p_ii * g                             (dL/dc_i)
 *   p_ij <- p_ij - eta_2 * (D_j(g, c_j) + lambda(r) mu (p_ij - p0_j))
 *
 * with p0_j = n_j / sum n and lambda(r) the loss scheduler. Cross-silo:
 * every client joins every round (FedALA: "FedAMP and APPLE ... require all
 * clients to join each iteration"). There is no global model. The two
 * readings (--reading, docs/algorithms.md):
 *
 *  - pfllib (the default): p_i starts at 1/N; D_j is the mean over the
 *    parameter tensors of mean(g . c_j), taken after the core's step; each
 *    batch rebuilds w_i from the cores; after the round the core becomes
 *    w_i as the last batch built it (PFLlib's model_c = deepcopy(model)),
 *    which the client uploads and is scored on; lambda is set at the end of
 *    a round, so rounds 1 and 2 both pull with 1.
 *  - paper: p_i starts at p0; D_j = <g, c_j>, the exact derivative (the
 *    authors' autograd through w_i), both steps from the same g and c_j;
 *    the client uploads its trained core; its scored model is w_i rebuilt
 *    from the latest cores at each broadcast. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/apple.h"
#include "modules/modules.h"
#include "util/err.h"

/* The cores and DR vectors are in stores (src/fl/store.h: lazy rows, in a file under --client-state,
 * checkpointed by the written rows); the run frees them. */
typedef struct {
    pfl_store *cores; /* per client: its latest core model, what the server sends every client */
    pfl_store *dr;    /* per client: p_i, clients floats */
    float *p0;        /* clients: n_j / sum n, p_i's start and the point it is pulled toward */
    float *grad;      /* workers x clients: scratch, the derivative of p_i */
} apple_state;

static int apple_check(const pfl_config *cfg) {
    const pfl_modules_config *m = &cfg->modules;
    if (cfg->join < 1.0)
        return pfl_err("--join %g: apple is cross-silo, every client trains every round (FedALA: 'FedAMP and APPLE "
                       "... require all clients to join each iteration'); use --join 1",
                       cfg->join);
    if (m->ala || m->flayer_agg)
        return pfl_err("%s: apple downloads multiple client models and builds its model from all of them, so there "
                       "is no one received model to mix with (FedALA, Table 4: ALA applied to every method 'except "
                       "for FedFomo and APPLE (as they download multiple client models)')",
                       m->ala ? "--ala" : "--flayer-agg");
    if (m->flayer_mask)
        return pfl_err("--flayer-mask: apple's server sends each client's whole core model to the others; a masked "
                       "upload leaves the unsent elements unknown");
    const char *sched = cfg->algo.apple_scheduler; /* NULL: the default, cos */
    if (sched && strcmp(sched, "cos") && strcmp(sched, "exp"))
        return pfl_err("--apple-scheduler '%s': expected cos or exp", sched);
    return pfl_check_reading(cfg);
}

static size_t vector_len(const pfl_fl *fl) { return pfl_model_vector_len(fl->model); }

static int apple_create(pfl_fl *fl) {
    const int N = fl->cfg.clients;
    const size_t V = vector_len(fl);
    apple_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    if (!(s->p0 = pfl_malloc(sizeof(float) * (size_t)N)) ||
        !(s->grad = pfl_malloc(sizeof(float) * (size_t)N * (size_t)fl->num_workers)))
        return -1;
    double total = 0.0;
    for (int c = 0; c < N; c++) total += fl->part->clients[c].n_train;
    for (int c = 0; c < N; c++)
        s->p0[c] = total > 0.0 ? (float)(fl->part->clients[c].n_train / total) : 1.0f / (float)N;
    /* every core starts as the initial model, every p_i as p0 (paper) or 1/N (PFLlib's self.ps) */
    float *uniform = pfl_malloc(sizeof(float) * (size_t)N);
    if (!uniform) return -1;
    for (int c = 0; c < N; c++) uniform[c] = 1.0f / (float)N;
    s->cores = pfl_fl_store(fl, "apple-cores", N, V, fl->global);
    s->dr = s->cores ? pfl_fl_store(fl, "apple-dr", N, (size_t)N, pfl_reading_paper(&fl->cfg) ? s->p0 : uniform) : NULL;
    free(uniform);
    return s->cores && s->dr ? 0 : -1;
}

static void apple_destroy(pfl_fl *fl) {
    apple_state *s = fl->algo_state;
    free(s->p0);
    free(s->grad);
    free(s);
    fl->algo_state = NULL;
}

const float *pfl_apple_dr(const pfl_fl *fl, int client) {
    const apple_state *s = fl->algo_state;
    return pfl_store_read(s->dr, client);
}

const float *pfl_apple_core(const pfl_fl *fl, int client) {
    const apple_state *s = fl->algo_state;
    return pfl_store_read(s->cores, client);
}

double pfl_apple_lambda(const pfl_fl *fl) {
    const pfl_algo_params *a = &fl->cfg.algo;
    /* the pull lasts the first floor(L * R) rounds (PFLlib: int(args.L * args.global_rounds)); round r
     * is the scheduler's r - 1, so round 1 has lambda 1; PFLlib sets lambda at the end of a round from
     * that round's index, so its round r pulls with the scheduler's r - 2, and round 1 with its
     * initial lambda = 1 */
    const bool pfllib = !pfl_reading_paper(&fl->cfg);
    if (pfllib && fl->round <= 1) return 1.0;
    const int last = (int)(a->apple_l * (float)fl->cfg.rounds), r = fl->round - (pfllib ? 2 : 1);
    if (r < 0 || r >= last) return 0.0;
    if (a->apple_scheduler && !strcmp(a->apple_scheduler, "exp")) return pow(0.001, (double)r / last);
    const double pi = 3.14159265358979323846;
    return (cos(pi * r / last) + 1.0) / 2.0;
}

/* w = sum_j p_j c_j on the parameters, with `own` in place of client's core; the running
 * statistics are own's (p is learned without bounds, so a mixed variance could turn negative).
 * Summed in client order. */
void pfl_apple_personal(const pfl_fl *fl, int client, const float *p, const float *own, float *w) {
    const size_t P = fl->model->num_params, V = vector_len(fl);
    memset(w, 0, sizeof(float) * P);
    for (int j = 0; j < fl->cfg.clients; j++)
        cblas_saxpy((int)P, p[j], j == client ? own : pfl_apple_core(fl, j), 1, w, 1);
    memcpy(w + P, own + P, sizeof(float) * (V - P));
}

/* What the server sends makes the client's model: w_i from every client's latest core (paper), or its own
 * core, which is the w_i its last batch built (PFLlib: the model scored is the one training left). */
static void apple_receive(pfl_fl *fl, int client, const float *state, float *received) {
    (void)state;
    if (pfl_reading_paper(&fl->cfg))
        pfl_apple_personal(fl, client, pfl_apple_dr(fl, client), pfl_apple_core(fl, client), received);
    else
        memcpy(received, pfl_apple_core(fl, client), sizeof(float) * vector_len(fl));
}

/* dL/dc_i = p_ii g: SGD with the run's momentum and weight decay (FLAYER's per-layer rates with --flayer-lr) on
 * the core, at the run's rate times --apple-core-scale (0: the number of clients, as PFLlib's clientAPPLE, which
 * FedALA ran: p_ii starts near 1/N, so the core would otherwise learn N times slower than a FedAvg model); `g`,
 * the batch's gradient at w_i, is scaled in place. */
static void core_step(pfl_fl *fl, pfl_worker *w, pfl_xbuf *core_v, pfl_xbuf *g, float p_own) {
    const pfl_model *m = fl->model;
    const float scale = fl->cfg.algo.apple_core_scale > 0.0f ? fl->cfg.algo.apple_core_scale : (float)fl->cfg.clients;
    float *gh = pfl_exec_host(g);
    cblas_sscal((int)m->num_params, p_own * scale, gh, 1);
    float lrs[PFL_MAX_LAYERS];
    const float lr = pfl_round_lr(fl);
    if (fl->cfg.modules.flayer_lr) pfl_flayer_layer_lrs(lrs, m, gh, lr);
    for (int l = 0; l < m->num_layers; l++) {
        const pfl_sgd opt = {fl->cfg.modules.flayer_lr ? lrs[l] : lr, fl->cfg.momentum, fl->cfg.weight_decay};
        pfl_exec_sgd(w->exec, core_v, g, &w->velocity, m->layers[l].offset, m->layers[l].length, &opt);
    }
}

void pfl_apple_step(pfl_fl *fl, int client, pfl_worker *w, float *core, float *p, float *model, double lambda_mu,
                    pfl_rng *dropout, float *loss, int *correct) {
    const apple_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    pfl_exec *x = w->exec;
    const int N = fl->cfg.clients;
    const size_t P = m->num_params, V = vector_len(fl);
    float *g = pfl_exec_host(&w->grads);
    pfl_xbuf model_v = pfl_exec_view(x, model, V, true), core_v = pfl_exec_view(x, core, V, true);
    pfl_exec_zero(x, &w->grads, 0, P);
    pfl_exec_forward(x, &model_v, true, dropout);
    *loss = pfl_exec_xent(x, NULL);
    pfl_exec_update_stats(x, &core_v); /* the core's statistics move with its batches ... */
    memcpy(model + P, core + P, sizeof(float) * (V - P)); /* ... and are the model's */
    *correct = pfl_exec_correct(x);
    pfl_exec_backward(x, &model_v, &w->grads, 0, 1.0f, NULL, 0);
    /* dL/dp_j = <g, c_j> + lambda mu (p_j - p0_j), every one before either step; the model follows each
     * other client's p_j at once, w += (p_j' - p_j) c_j, while c_j is in cache (one pass over the cores) */
    float *p_next = s->grad + (size_t)N * (size_t)w->id;
    const double eta2 = fl->cfg.algo.apple_dr_lr;
    for (int j = 0; j < N; j++) {
        const float *c = j == client ? core : pfl_apple_core(fl, j);
        const double dp = (double)cblas_sdot((int)P, g, 1, c, 1) + lambda_mu * ((double)p[j] - (double)s->p0[j]);
        p_next[j] = (float)((double)p[j] - eta2 * dp);
        if (j != client) cblas_saxpy((int)P, p_next[j] - p[j], c, 1, model, 1);
    }
    /* the core's step; the model trades p_ii c_i for p_ii' c_i' */
    cblas_saxpy((int)P, -p[client], core, 1, model, 1);
    core_step(fl, w, &core_v, &w->grads, p[client]);
    cblas_saxpy((int)P, p_next[client], core, 1, model, 1);
    memcpy(p, p_next, sizeof(float) * (size_t)N);
    pfl_exec_unview(x, &core_v);
    pfl_exec_unview(x, &model_v);
}

/* PFLlib's derivative of the loss in p_j: the mean over the parameter tensors of each tensor's mean of
 * g . c_j (clientapple.py: p_grad += torch.mean(param.grad * param_c); p_grad / cnt). */
static double tensor_mean_dot(const pfl_model *m, const float *g, const float *c) {
    double sum = 0.0;
    for (int t = 0; t < m->num_tensors; t++) {
        const pfl_tensor *ts = &m->tensors[t];
        sum += (double)cblas_sdot((int)ts->length, g + ts->offset, 1, c + ts->offset, 1) / (double)ts->length;
    }
    return m->num_tensors > 0 ? sum / m->num_tensors : 0.0;
}

void pfl_apple_step_pfllib(pfl_fl *fl, int client, pfl_worker *w, float *core, float *p, float *model,
                           double lambda_mu, pfl_rng *dropout, float *loss, int *correct) {
    const apple_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    pfl_exec *x = w->exec;
    const int N = fl->cfg.clients;
    const size_t P = m->num_params, V = vector_len(fl);
    /* aggregate_parameters: w_i = sum_j p_j c_j over the parameters; the running statistics are the model's */
    memset(model, 0, sizeof(float) * P);
    for (int j = 0; j < N; j++) cblas_saxpy((int)P, p[j], j == client ? core : pfl_apple_core(fl, j), 1, model, 1);
    pfl_xbuf model_v = pfl_exec_view(x, model, V, true), core_v = pfl_exec_view(x, core, V, true);
    pfl_exec_zero(x, &w->grads, 0, P);
    pfl_exec_forward(x, &model_v, true, dropout);
    *loss = pfl_exec_xent(x, NULL);
    pfl_exec_update_stats(x, &model_v);
    *correct = pfl_exec_correct(x);
    pfl_exec_backward(x, &model_v, &w->grads, 0, 1.0f, NULL, 0);
    /* the core steps first, on a copy of g (the DR step reads g itself) */
    memcpy(pfl_exec_host(&w->aux_grads), pfl_exec_host(&w->grads), sizeof(float) * P);
    core_step(fl, w, &core_v, &w->aux_grads, p[client]);
    /* then every p_j, the own core as just stepped */
    const float *g = pfl_exec_host(&w->grads);
    const double eta2 = fl->cfg.algo.apple_dr_lr;
    for (int j = 0; j < N; j++) {
        const double dp = tensor_mean_dot(m, g, j == client ? core : pfl_apple_core(fl, j)) +
                          lambda_mu * ((double)p[j] - (double)s->p0[j]);
        p[j] = (float)((double)p[j] - eta2 * dp);
    }
    pfl_exec_unview(x, &core_v);
    pfl_exec_unview(x, &model_v);
}

typedef struct {
    float *core;     /* the client's core, training */
    float *p;        /* its DR vector, training */
    double lambda_mu;
} apple_batch;

/* Every batch is APPLE's step: its own work on host memory. */
static bool apple_batch_step(void *ctx, pfl_owned_batch *b) {
    apple_batch *a = ctx;
    pfl_exec_gather(b->x, b->idx, b->B);
    float loss;
    int correct;
    (pfl_reading_paper(&b->fl->cfg) ? pfl_apple_step : pfl_apple_step_pfllib)(
        b->fl, b->client, b->w, a->core, a->p, pfl_exec_host(b->model), a->lambda_mu, b->dropout, &loss, &correct);
    pfl_step_count(b, loss, correct, b->B);
    return true;
}

/* Training leaves in `model` what the client uploads: its trained core (paper), or w_i as its last batch
 * built it (PFLlib: model_c = deepcopy(model), the new core). */
static void apple_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const size_t V = vector_len(fl);
    const apple_state *s = fl->algo_state;
    const bool paper = pfl_reading_paper(&fl->cfg);
    apple_batch a = {w->aux, pfl_store_write(s->dr, client), pfl_apple_lambda(fl) * fl->cfg.algo.apple_mu};
    if (!a.p) return; /* the store's error fails the round */
    memcpy(a.core, pfl_apple_core(fl, client), sizeof(float) * V);
    /* paper: each step keeps `model` w_i for the p and core it leaves; PFLlib: each batch rebuilds it */
    if (paper) pfl_apple_personal(fl, client, a.p, a.core, model);
    pfl_step step = pfl_step_default(fl);
    step.own = apple_batch_step, step.own_ctx = &a;
    pfl_step_run(fl, client, w, model, &step, stats);
    if (paper) memcpy(model, a.core, sizeof(float) * V);
}

/* After training the client holds w_i with its trained core and DR vector (the others' cores as it
 * downloaded them), which the broadcast rebuilds from every new core (paper); or its new core (PFLlib). */
static void apple_finish(pfl_fl *fl, int client, const float *model, float *state) {
    if (pfl_reading_paper(&fl->cfg)) pfl_apple_personal(fl, client, pfl_apple_dr(fl, client), model, state);
    else memcpy(state, model, sizeof(float) * vector_len(fl));
}

/* The server keeps every core, to send it to every client. */
static void apple_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    const apple_state *s = fl->algo_state;
    for (int k = 0; k < n; k++) {
        float *core = pfl_store_write(s->cores, clients[k]);
        if (!core) return; /* the store's error fails the round */
        memcpy(core, uploads[k], sizeof(float) * vector_len(fl));
    }
}

/* FedALA's Table 3, "(1+M)*Sigma" with M the total number of clients: every core down (PFLlib's
 * send_models sends all of them, the client's own included), the client's core up. */
static void apple_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                                uint64_t *up) {
    (void)client, (void)sent, (void)upload;
    const uint64_t model = 4 * (uint64_t)vector_len(fl);
    *down = (uint64_t)fl->cfg.clients * model;
    *up = model;
}

static int apple_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const apple_state *s = fl->algo_state;
    return pfl_store_save(s->cores, w, "apple.cores") || pfl_store_save(s->dr, w, "apple.dr") ? -1 : 0;
}

static int apple_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    apple_state *s = fl->algo_state;
    return pfl_store_load(s->cores, r, "apple.cores") || pfl_store_load(s->dr, r, "apple.dr") ? -1 : 0;
}

/* FedALA's appendix: "For APPLE, we set the loss scheduler type to 'cos', directed relationship
 * (DR) learning rate eta_2=0.01 ..., mu=0.1 ..., L=0.2". */
static const pfl_param apple_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "apple-dr-lr", apple_dr_lr), .def = 0.01, .max = 1e3, .metavar = "F",
     .help = "eta_2: learning rate of the directed-relationship vector p_i"},
    {PFL_ALGO_PARAM(FLOAT, "apple-mu", apple_mu), .def = 0.1, .max = 1e6, .metavar = "F",
     .help = "mu: coefficient of lambda(r) mu/2 ||p_i - p0||^2, the pull toward the data shares p0"},
    {PFL_ALGO_PARAM(FLOAT, "apple-l", apple_l), .def = 0.2, .max = 1, .metavar = "F",
     .help = "L: the pull lasts the first floor(L x rounds) rounds"},
    {PFL_ALGO_PARAM(FLOAT, "apple-core-scale", apple_core_scale), .def = 0, .max = 1e6, .metavar = "F",
     .help = "the core's learning rate is --lr times F (0: the number of clients, as PFLlib; 1: the authors' code)"},
    {PFL_ALGO_PARAM(STRING, "apple-scheduler", apple_scheduler), .def_text = "cos", .metavar = "cos|exp",
     .help = "lambda(r) over those rounds: cos (cos(pi r/T)+1)/2 | exp 0.001^(r/T)"},
    PFL_READING_PARAM("pfllib: p_i starts at 1/N, its gradient averages per-tensor means of g.c_j, the core becomes "
                      "w_i after each round and is the model scored (clientapple.py, FedALA's and FLAYER's runs) | "
                      "paper: p_i starts at the data shares, the exact <g, c_j>, the trained core uploaded and w_i "
                      "rebuilt from every core (the authors' code)"),
};

const pfl_algo pfl_algo_apple = {
    .name = "apple",
    .description = "APPLE: personalized model sum_j p_ij c_j over every client's core, core and DR vector "
                   "learned per batch; cross-silo (--apple-dr-lr, --apple-mu, --apple-l, --apple-scheduler, --apple-core-scale, "
                   "--reading)",
    PFL_PARAMS(apple_params),
    .has_global = false,
    .stateful = true,
    .whole_uploads = true, /* MPI: the server keeps every core whole to send it on */
    .create = apple_create,
    .check = apple_check,
    .destroy = apple_destroy,
    .receive = apple_receive,
    .local_train = apple_train,
    .finish = apple_finish,
    .aggregate = apple_aggregate,
    .message_bytes = apple_message_bytes,
    .save = apple_save,
    .load = apple_load,
};
