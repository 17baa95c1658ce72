/* FML (Shen, Zhang, Jia, Zhang, Huang, Zhou, Kuang, Wu, Wu, 2020,
 * "Federated Mutual Learning"): each client keeps a personal model and
 * trains it together with a "meme" model, a copy of the global one, by deep
 * mutual learning on the same batches; the memes are averaged into the
 * global model, the personal models never leave their clients. On each
 * batch, from the same personal model p and meme q (PFLlib's clientfml.py,
 * which the defaults and readings follow):
 *
 *   L_p = alpha CE(p) + (1 - alpha) KL(q || p)
 *   L_q = beta CE(q) + (1 - beta) KL(p || q)
 *
 * each KL PyTorch's KLDivLoss (the mean over batch x classes); both models
 * take one SGD step at --lr on the gradient of L_p + L_q, each clipped to
 * norm 10. PFLlib does not detach the KL targets, so each KL term reaches
 * both models (--fml-detach: each model learns from its own term alone,
 * the target held fixed, as deep mutual learning reads it). The server
 * averages the memes with equal weights.
 *
 * The personal model is the client's state (the whole model, trained in
 * place like Ditto's), the model evaluated as personalized; the meme starts
 * from the global model each round and is uploaded. --momentum and
 * --weight-decay act on the meme, the model FedAvg would train; the
 * personal model takes plain steps (PFLlib's optimizers are plain SGD). */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/mutual.h"
#include "util/err.h"

static int fml_check(const pfl_config *cfg) {
    if (cfg->modules.flayer_lr)
        return pfl_err("--flayer-lr: fml trains its two models with its own steps on each batch");
    return 0;
}

typedef struct {
    float *personal; /* the client's personal model, trained in place */
    float *scratch;  /* B x C: the meme's logits; then the two logit gradients */
} fml_batch_ctx;

/* One batch of FML: both models from the same state; the personal model's
 * loss and correct predictions are what the step counts. */
static bool fml_batch(void *ctx, pfl_owned_batch *b) {
    const fml_batch_ctx *c = ctx;
    pfl_fl *fl = b->fl;
    const pfl_model *m = fl->model;
    const pfl_algo_params *a = &fl->cfg.algo;
    pfl_worker *w = b->w;
    pfl_exec *x = b->x;
    const size_t P = m->num_params, V = pfl_model_vector_len(m);
    const int B = b->B, C = m->classes;
    float *zq = c->scratch, *gp = zq + (size_t)B * C, *gq = gp + (size_t)B * C;
    pfl_exec_gather(x, b->idx, B);
    pfl_rng meme_masks = *b->dropout; /* to repeat the meme's forward, dropout masks and all */
    pfl_exec_forward(x, b->model, true, b->dropout);
    memcpy(zq, pfl_exec_features(x, m->num_layers, zq), sizeof(float) * (size_t)B * C);
    pfl_exec_update_stats(x, b->model);
    pfl_xbuf personal = pfl_exec_view(x, c->personal, V, true);
    pfl_exec_forward(x, &personal, true, b->dropout);
    pfl_exec_update_stats(x, &personal);
    const float ce_p = pfl_exec_xent(x, NULL);
    const int correct = pfl_exec_correct(x);
    memset(gp, 0, sizeof(float) * 2 * (size_t)B * C);
    double kl_qp, kl_pq;
    pfl_mutual_kl(pfl_exec_features(x, m->num_layers, gq + (size_t)B * C), zq, B, C, 1.0f - a->fml_alpha,
                  1.0f - a->fml_beta, !a->fml_detach, gp, gq, &kl_qp, &kl_pq);
    const pfl_xinjection into_p = {m->num_layers, gp}, into_q = {m->num_layers, gq};
    pfl_exec_zero(x, &w->aux_grads, 0, P);
    pfl_exec_backward(x, &personal, &w->aux_grads, 0, a->fml_alpha, &into_p, 1);
    pfl_exec_forward(x, b->model, true, &meme_masks); /* the meme's activations again, for its backward */
    pfl_exec_xent(x, NULL);
    pfl_exec_zero(x, &w->grads, 0, P);
    pfl_exec_backward(x, b->model, &w->grads, 0, a->fml_beta, &into_q, 1);
    pfl_mutual_clip(x, &w->aux_grads, P, PFL_MUTUAL_CLIP);
    pfl_mutual_clip(x, &w->grads, P, PFL_MUTUAL_CLIP);
    const float lr = pfl_round_lr(fl);
    const pfl_sgd plain = {lr, 0.0f, 0.0f}, meme = {lr, fl->cfg.momentum, fl->cfg.weight_decay};
    pfl_exec_sgd(x, &personal, &w->aux_grads, NULL, 0, P, &plain);
    pfl_exec_sgd(x, b->model, &w->grads, &w->velocity, 0, P, &meme);
    pfl_exec_unview(x, &personal);
    pfl_step_count(b, (float)(a->fml_alpha * ce_p + (1.0f - a->fml_alpha) * kl_qp), correct, B);
    return true;
}

static void fml_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const int C = fl->model->classes;
    fml_batch_ctx c = {pfl_client_model(fl, client), pfl_malloc(sizeof(float) * 4 * (size_t)fl->cfg.batch * C)};
    if (!c.personal || !c.scratch) { /* no room: the store's error fails the round; out of memory: no training */
        free(c.scratch);
        return;
    }
    pfl_step s = pfl_step_default(fl);
    s.own = fml_batch, s.own_ctx = &c;
    pfl_step_run(fl, client, w, model, &s, stats);
    free(c.scratch);
}

/* The meme starts from the global model. */
static void fml_init(pfl_fl *fl, int client, float *model) {
    (void)client;
    memcpy(model, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
}

/* The personal model was trained in place; the meme is uploaded, not kept. */
static void fml_finish(pfl_fl *fl, int client, const float *model, float *state) {
    (void)fl, (void)client, (void)model, (void)state;
}

/* PFLlib's main.py defaults (-al 1.0, -bt 0.0): the personal model learns
 * from the labels, the meme from the personal model alone. */
static const pfl_param fml_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "fml-alpha", fml_alpha), .def = 1.0, .max = 1.0, .metavar = "F",
     .help = "alpha: the personal model's loss is alpha CE + (1 - alpha) KL(meme || personal), in [0, 1]"},
    {PFL_ALGO_PARAM(FLOAT, "fml-beta", fml_beta), .def = 0.0, .max = 1.0, .metavar = "F",
     .help = "beta: the meme model's loss is beta CE + (1 - beta) KL(personal || meme), in [0, 1]"},
    {PFL_ALGO_PARAM(BOOL, "fml-detach", fml_detach),
     .help = "hold each KL term's target fixed, so each model learns from its own term alone (deep mutual "
             "learning; PFLlib lets both terms reach both models)"},
};

const pfl_algo pfl_algo_fml = {
    .name = "fml",
    .description = "FML: a personal model and a shared meme model trained by mutual distillation on the same "
                   "batches (--fml-*)",
    PFL_PARAMS(fml_params),
    .has_global = true,
    .stateful = true,
    .keeps_state = true,
    .check = fml_check,
    .local_init = fml_init,
    .local_train = fml_train,
    .finish = fml_finish,
    .aggregate = pfl_plain_mean_aggregate,
};
