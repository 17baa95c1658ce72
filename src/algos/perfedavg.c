/* Per-FedAvg (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020): FedAvg that learns
 * a meta-model w from which one step of local gradient descent personalizes
 * well (MAML). Each local step draws three batches D, D', D'' of --batch
 * samples from the client's shuffled training split:
 *
 *   w' = w - alpha * grad f(w; D)                       (the personalization step)
 *   FO: w <- w - beta * grad f(w'; D')                  (first-order, the default)
 *   HF: w <- w - beta * (I - alpha * H(w; D'')) grad f(w'; D')
 *       with H(w; D'') g = [grad f(w + delta g; D'') - grad f(w - delta g; D'')] / (2 delta)
 *       (--perfedavg-hf: Hessian-free, two more gradients per step)
 *
 * FO uses D and D' only (PFLlib's clientperavg: a batch of 2 x batch samples
 * split in two halves). alpha = beta = --lr by default (FedALA's appendix:
 * "we set the step size alpha equal to the local learning rate"; PFLlib's
 * code, which FedALA ran, sets beta = learning_rate too). The upload is w,
 * aggregated as FedAvg. The personalized model is the model the client holds
 * after the broadcast (the global model w, or with --ala / --flayer-agg the
 * module's mix) after --perfedavg-steps (1) steps of size alpha on batches
 * of its training data, drawn from the stream (seed, round, client, ADAPT)
 * of the round it prepares; it is built when evaluated, no client keeps it.
 * Its steps, like all of Per-FedAvg's, are plain gradient steps: --momentum,
 * --weight-decay and --flayer-lr are refused; so is --eval-moment
 * after-train, which would score the meta-model training left, unadapted.
 *
 * --reading pfllib (the default): a round trains twice the local steps
 * --epochs make, as PFLlib's serverperavg.py calls each client's train()
 * twice a round (FedALA's and FLAYER's tables ran it); --reading paper:
 * once (the paper's tau local steps are the run's --epochs). */
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

/* alpha and beta of round `round` (0: --lr, decayed as every run's learning rate) */
static float alpha_of(const pfl_fl *fl, int round) {
    const float a = fl->cfg.algo.perfedavg_alpha;
    return a > 0.0f ? a : pfl_lr_of_round(fl, round);
}

static float beta_of(const pfl_fl *fl) {
    const float b = fl->cfg.algo.perfedavg_beta;
    return b > 0.0f ? b : pfl_round_lr(fl);
}

/* PFLlib's server trains each selected client twice a round (client.train() twice). */
static int train_calls(const pfl_fl *fl) { return pfl_reading_paper(&fl->cfg) ? 1 : 2; }

static int perfedavg_check(const pfl_config *cfg) { return pfl_check_reading(cfg); }

static int perfedavg_create(pfl_fl *fl) {
    if (fl->cfg.momentum != 0.0f || fl->cfg.weight_decay != 0.0f)
        return pfl_err("perfedavg: --momentum and --weight-decay are not supported (Per-FedAvg's steps are plain "
                       "gradient steps of sizes alpha and beta)");
    if (fl->cfg.eval_moment == PFL_EVAL_AFTER_TRAIN)
        return pfl_err("perfedavg: --eval-moment after-train is not supported (its personalized model is the "
                       "received meta-model after --perfedavg-steps steps, built when scored; training leaves "
                       "only the meta-model)");
    if (fl->cfg.modules.flayer_lr)
        return pfl_err("perfedavg: --flayer-lr is not supported (Per-FedAvg's two steps have their own sizes, "
                       "--perfedavg-alpha and --perfedavg-beta)");
    return 0;
}

/* params[0..P) -= step * g */
static void descend(float *params, const float *g, size_t P, float step) {
    for (size_t i = 0; i < P; i++) params[i] -= step * g[i];
}

/* The gradient of the mean cross-entropy of `params` on the batch in the
 * executor into grads, from a training forward with dropout drawn from
 * `dropout`; the batch statistics move the running statistics of
 * `stats_of` (NULL: none, for the Hessian probes). Returns the loss; its
 * correct predictions into *correct (or NULL). */
static float batch_gradient(const pfl_fl *fl, pfl_exec *x, const float *params, pfl_xbuf *grads, pfl_rng *dropout,
                            float *stats_of, int *correct) {
    const size_t V = pfl_model_vector_len(fl->model);
    pfl_xbuf p = pfl_exec_view_const(x, params, V);
    pfl_exec_zero(x, grads, 0, fl->model->num_params);
    pfl_exec_forward(x, &p, true, dropout);
    const float loss = pfl_exec_xent(x, NULL);
    if (stats_of) {
        pfl_xbuf s = pfl_exec_view(x, stats_of, V, true);
        pfl_exec_update_stats(x, &s);
        pfl_exec_unview(x, &s);
    }
    if (correct) *correct = pfl_exec_correct(x);
    pfl_exec_backward(x, &p, grads, 0, 1.0f, NULL, 0);
    pfl_exec_unview(x, &p);
    return loss;
}

/* hv = H(w; D'') g by central differences of the gradient at w +- delta g,
 * both with the same dropout masks. Uses w->aux (the probe point), w->grads
 * and w->velocity (the two gradients). */
static void hessian_times(const pfl_fl *fl, pfl_worker *w, const float *model, const float *g, pfl_rng *dropout,
                          float *hv) {
    const size_t P = fl->model->num_params, V = pfl_model_vector_len(fl->model);
    const float delta = fl->cfg.algo.perfedavg_delta;
    const float *plus = pfl_exec_host(&w->grads), *minus = pfl_exec_host(&w->velocity);
    const pfl_rng masks = *dropout;
    pfl_rng r = masks;
    memcpy(w->aux, model, V * sizeof(float));
    descend(w->aux, g, P, -delta);
    batch_gradient(fl, w->exec, w->aux, &w->grads, &r, NULL, NULL);
    r = masks;
    memcpy(w->aux, model, V * sizeof(float));
    descend(w->aux, g, P, delta);
    batch_gradient(fl, w->exec, w->aux, &w->velocity, &r, NULL, NULL);
    *dropout = r;
    for (size_t i = 0; i < P; i++) hv[i] = (plus[i] - minus[i]) / (2.0f * delta);
}

/* One local step on the batch's n samples, split into k parts (D, D' and,
 * for HF, D''): batches of --batch, or nearly equal parts of a last,
 * shorter chunk (the method's own work on host memory). */
static bool meta_step(void *ctx, pfl_owned_batch *b) {
    const int k = *(const int *)ctx;
    pfl_fl *fl = b->fl;
    pfl_worker *w = b->w;
    pfl_exec *x = b->x;
    const size_t P = fl->model->num_params, V = pfl_model_vector_len(fl->model);
    float *model = pfl_exec_host(b->model), *g = pfl_exec_host(&w->grads), *g2 = pfl_exec_host(&w->aux_grads);
    int size[3], at = 0, correct;
    for (int i = 0; i < k; i++) size[i] = b->B / k + (i < b->B % k);
    /* w' = w - alpha grad f(w; D), in w->aux */
    pfl_exec_gather(x, b->idx, size[0]);
    float loss = batch_gradient(fl, x, model, &w->grads, b->dropout, model, &correct);
    pfl_step_count(b, loss, correct, size[0]);
    memcpy(w->aux, model, V * sizeof(float));
    descend(w->aux, g, P, alpha_of(fl, fl->round));
    /* g = grad f(w'; D'), in w->aux_grads */
    at += size[0];
    pfl_exec_gather(x, b->idx + at, size[1]);
    loss = batch_gradient(fl, x, w->aux, &w->aux_grads, b->dropout, model, &correct);
    pfl_step_count(b, loss, correct, size[1]);
    if (k == 3) { /* g -= alpha H(w; D'') g */
        at += size[1];
        pfl_exec_gather(x, b->idx + at, size[2]);
        hessian_times(fl, w, model, g2, b->dropout, w->aux);
        descend(g2, w->aux, P, alpha_of(fl, fl->round));
    }
    descend(model, g2, P, beta_of(fl));
    return true;
}

/* --epochs passes over the shuffled training split (twice that under
 * --reading pfllib), each cut into chunks of k x --batch samples (a last
 * chunk with fewer than k samples is left for that pass), each chunk one
 * local step. Under --local-steps K the round's epochs x K batches make
 * epochs x K / k local steps (at least one; twice as many under pfllib). */
static void perfedavg_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_client_data *cd = &fl->part->clients[client];
    int k = fl->cfg.algo.perfedavg_hf ? 3 : 2;
    const int chunk = k * fl->cfg.batch;
    const long per_pass = cd->n_train / chunk + (cd->n_train % chunk >= k);
    const long batches = pfl_epoch_steps(fl, fl->cfg.epochs);
    const long budget =
        train_calls(fl) * (batches > 0 ? (batches / k > 0 ? batches / k : 1) : per_pass * fl->cfg.epochs);
    if (per_pass == 0 || budget == 0) return;
    pfl_step step = pfl_step_default(fl);
    step.batch = chunk, step.min_batch = k, step.steps = (int)budget;
    step.own = meta_step, step.own_ctx = &k;
    pfl_step_run(fl, client, w, model, &step, stats);
}

/* --perfedavg-steps steps of size alpha on `model`, personalizing it for
 * round `round`: batches of --batch from the client's training split in the
 * order of the stream (seed, round, client, ADAPT), reshuffled when used up. */
static void personalize(pfl_fl *fl, int client, pfl_worker *w, float *model, int round) {
    const pfl_client_data *cd = &fl->part->clients[client];
    if (cd->n_train == 0) return;
    pfl_rng rng = pfl_rng_stream(fl->cfg.seed, round, client, PFL_RNG_ADAPT);
    memcpy(w->order, cd->train, sizeof(int) * (size_t)cd->n_train);
    for (int s = 0, start = cd->n_train; s < fl->cfg.algo.perfedavg_steps; s++, start += fl->cfg.batch) {
        if (start >= cd->n_train) {
            pfl_rng_shuffle(&rng, w->order, (size_t)cd->n_train);
            start = 0;
        }
        const int B = cd->n_train - start < fl->cfg.batch ? cd->n_train - start : fl->cfg.batch;
        pfl_exec_gather(w->exec, w->order + start, B);
        batch_gradient(fl, w->exec, model, &w->grads, &rng, model, NULL);
        descend(model, pfl_exec_host(&w->grads), fl->model->num_params, alpha_of(fl, round));
    }
}

/* The model the client holds now, personalized as for the next round. */
static const float *perfedavg_personal_model(pfl_fl *fl, int client, float *scratch) {
    const float *held = pfl_default_personal_model(fl, client, scratch);
    if (held != scratch) memcpy(scratch, held, pfl_model_vector_len(fl->model) * sizeof(float));
    personalize(fl, client, pfl_fl_worker_here(fl), scratch, fl->round + 1);
    return scratch;
}

/* FedALA's appendix: "For Per-FedAvg, we set the step size alpha equal to
 * the local learning rate"; beta = the learning rate as in PFLlib's code.
 * One personalization step ("the global model after one local step"), FO. */
static const pfl_param perfedavg_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "perfedavg-alpha", perfedavg_alpha), .def = 0, .max = 1e6, .metavar = "F",
     .help = "personalization step size alpha (0: --lr)"},
    {PFL_ALGO_PARAM(FLOAT, "perfedavg-beta", perfedavg_beta), .def = 0, .max = 1e6, .metavar = "F",
     .help = "meta step size beta (0: --lr)"},
    {PFL_ALGO_PARAM(INT, "perfedavg-steps", perfedavg_steps), .def = 1, .max = 1e5, .metavar = "S",
     .help = "steps of size alpha that personalize the model evaluated (0: the meta-model itself)"},
    {PFL_ALGO_PARAM(BOOL, "perfedavg-hf", perfedavg_hf), .def = 0,
     .help = "Hessian-free variant: (I - alpha H) from two more gradients per step (default: first-order)"},
    {PFL_ALGO_PARAM(FLOAT, "perfedavg-delta", perfedavg_delta), .def = 0.001, .min = 0, .min_exclusive = true,
     .max = 1, .metavar = "F", .help = "delta of the Hessian-free differences"},
    PFL_READING_PARAM("pfllib: a round trains twice the steps --epochs make (serverperavg.py calls train() twice, "
                      "FedALA's runs) | paper: once"),
};

const pfl_algo pfl_algo_perfedavg = {
    .name = "perfedavg",
    .description = "Per-FedAvg: MAML meta-model, personalized by --perfedavg-steps steps of size alpha (--reading)",
    PFL_PARAMS(perfedavg_params),
    .has_global = true,
    .create = perfedavg_create,
    .check = perfedavg_check,
    .local_train = perfedavg_train,
    .personal_model = perfedavg_personal_model,
};
