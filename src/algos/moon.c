/* MOON (Li, He, Song, CVPR 2021, "Model-Contrastive Federated Learning"):
 * FedAvg whose local loss adds a model-contrastive term that pulls the
 * representation z the trained model gives a sample toward z_glob, the one
 * of the global model it received, and pushes it from z_prev, the one of
 * the client's own model of its previous training:
 *
 *   l_con = -log( exp(sim(z, z_glob) / tau) /
 *                 (exp(sim(z, z_glob) / tau) + exp(sim(z, z_prev) / tau)) ),
 *   loss  = CE + mu x mean over the batch of l_con,
 *
 * sim the cosine similarity. As PFLlib's clientmoon.py, z is the input of
 * the model's last layer (model.base(x) under a one-layer head: the paper's
 * projection head is not added), both references run as fixed teachers, and
 * the previous model of a client that has not trained yet is the initial
 * global model. The previous models are a per-client store (written by the
 * client's own training; checkpointed); the server is FedAvg's.
 * docs/algorithms.md has the readings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

typedef struct {
    pfl_store *prev; /* per client: its model as its last training left it */
} moon_state;

/* The representation the term compares: the input of the last layer. */
static int feature_layer(const pfl_model *m) { return m->num_layers - 1; }

static int moon_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    if (m->num_layers < 2)
        return pfl_err("moon: model %s has one layer, so no representation below its last layer to contrast",
                       m->name);
    moon_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    /* before any training a client's previous model is the model it was made with, the initial global one */
    s->prev = pfl_fl_store(fl, "moon-prev", fl->cfg.clients, pfl_model_vector_len(m), fl->global);
    return s->prev ? 0 : -1;
}

static void moon_destroy(pfl_fl *fl) {
    free(fl->algo_state); /* the store is the run's to free */
    fl->algo_state = NULL;
}

/* torch's F.cosine_similarity eps: each norm is clamped below at this. */
#define MOON_COS_EPS 1e-8

/* cos(z, r) = z.r / (max(|z|, eps) max(|r|, eps)), and what its gradient
 * with respect to z needs: d cos / dz = a r - b z. */
typedef struct {
    double cos, a, b;
} cosine_parts;

static cosine_parts cosine(const float *z, const float *r, long n) {
    double zr = 0.0, zz = 0.0, rr = 0.0;
    for (long j = 0; j < n; j++) zr += (double)z[j] * r[j], zz += (double)z[j] * z[j], rr += (double)r[j] * r[j];
    const double zlen = sqrt(zz), nz = fmax(zlen, MOON_COS_EPS), nr = fmax(sqrt(rr), MOON_COS_EPS);
    const double cos = zr / (nz * nr);
    /* a clamped |z| is a constant, so only r's part is left */
    return (cosine_parts){cos, 1.0 / (nz * nr), zlen > MOON_COS_EPS ? cos / (nz * zlen) : 0.0};
}

/* One sample's l_con = log(1 + exp((cos_prev - cos_glob) / tau)) (the
 * fraction's negative log, written stably); with dz non-NULL writes its
 * gradient times `scale`: sigmoid((cos_prev - cos_glob) / tau) / tau x
 * (dcos_prev - dcos_glob). */
static double sample_loss(const float *z, const float *glob, const float *prev, long n, double tau, double scale,
                          float *dz) {
    const cosine_parts g = cosine(z, glob, n), p = cosine(z, prev, n);
    const double t = (p.cos - g.cos) / tau;
    const double loss = t > 0 ? t + log1p(exp(-t)) : log1p(exp(t));
    if (dz) {
        const double slope = scale / (tau * (1.0 + exp(-t)));
        for (long j = 0; j < n; j++)
            dz[j] = (float)(slope * (p.a * prev[j] - g.a * glob[j] - (p.b - g.b) * z[j]));
    }
    return loss;
}

double pfl_moon_contrastive(const float *z, const float *glob, const float *prev, int B, long n, float tau,
                            float *dz) {
    double total = 0.0;
    for (int i = 0; i < B; i++) {
        const size_t at = (size_t)i * (size_t)n;
        total += sample_loss(z + at, glob + at, prev + at, n, tau, 1.0 / B, dz ? dz + at : NULL);
    }
    return total / B;
}

/* The term's value: refs[0] the global model's representations, refs[1] the previous model's. */
static double contrastive_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)correct;
    return pfl_moon_contrastive(b->z, b->refs[0], b->refs[1], b->B, b->n, *(const float *)ctx, dz);
}

/* CE + mu l_con toward the received global model and away from the previous
 * local one; the trained model then becomes the client's previous model. */
static void moon_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    moon_state *s = fl->algo_state;
    const float tau = fl->cfg.algo.moon_tau;
    pfl_step step = pfl_step_default(fl);
    const pfl_loss_term con = {.name = "moon's model-contrastive loss",
                               .at = feature_layer(fl->model),
                               .weight = fl->cfg.algo.moon_mu,
                               .refs = {fl->global, pfl_store_read(s->prev, client)},
                               .num_refs = 2,
                               .value = contrastive_term,
                               .ctx = (void *)&tau};
    pfl_step_add_term(&step, &con);
    pfl_step_run(fl, client, w, model, &step, stats);
    float *prev = pfl_store_write(s->prev, client);
    if (!prev) return; /* no room: the run fails with the store's message */
    memcpy(prev, model, pfl_model_vector_len(fl->model) * sizeof(float));
    pfl_store_release(s->prev, client);
}

static int moon_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const moon_state *s = fl->algo_state;
    return pfl_store_save(s->prev, w, "moon.prev");
}

static int moon_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    moon_state *s = fl->algo_state;
    return pfl_store_load(s->prev, r, "moon.prev");
}

/* The MOON paper (Section 4.1): "the default value of tau is 0.5" and mu 5
 * for CIFAR-10, 1 for the other datasets; PFLlib's main.py has tau 1.0 and
 * mu 0, its default for every method, under which MOON is FedAvg. */
static const pfl_param moon_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "moon-mu", moon_mu), .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "mu, the weight of the model-contrastive loss"},
    {PFL_ALGO_PARAM(FLOAT, "moon-tau", moon_tau), .def = 0.5, .min = 1e-3, .max = 1e3, .metavar = "F",
     .help = "tau, the temperature of the model-contrastive loss"},
};

const pfl_algo pfl_algo_moon = {
    .name = "moon",
    .description = "MOON: FedAvg with a model-contrastive loss toward the global model's representation and away "
                   "from the previous local one's (--moon-*)",
    PFL_PARAMS(moon_params),
    .has_global = true,
    .create = moon_create,
    .destroy = moon_destroy,
    .local_train = moon_train,
    .save = moon_save,
    .load = moon_load,
};
