/* FedGen (Zhu, Hong, Zhou, ICML 2021, "Data-Free Knowledge Distillation for
 * Heterogeneous Federated Learning"), as PFLlib's clientgen.py and
 * servergen.py run it: the server learns a generator G(y) of features
 * (what the base of the model gives a sample of class y) with no data, so
 * that the clients' heads classify them as y; the clients add to their
 * loss the cross-entropy of their own head on G's features:
 *
 *  - G is nn.Linear(noise + C, hidden), BatchNorm1d, ReLU, nn.Linear(hidden,
 *    D), fed uniform noise beside the label's one-hot, always in training
 *    mode (batch statistics), D the width of the features entering the
 *    model's last layer (its head, one Linear);
 *  - client, each batch: loss = CE(model(x), y) + CE(head(G(y')), y'), y' a
 *    batch of labels drawn in proportion to every client's training
 *    samples per class; G is fixed (only the head learns from the term);
 *  - server, after FedAvg's mean: --fedgen-server-epochs Adam steps on G
 *    of CE(sum_k w_k head_k(G(y')), y'), w_k the uploads' sample shares.
 *    The head is one Linear layer and the shares sum to 1, so the
 *    ensemble's logits are those of the averaged head: G trains on the new
 *    global model's head, which is the same number (and what makes the
 *    server's sum a reduction under MPI, not a gather).
 *
 * G's parameters and Adam's moments are server state, the same on every
 * rank, checkpointed; G travels to every client with the model (counted in
 * the bytes down). docs/algorithms.md has the readings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "util/err.h"

/* Where the generator's parameters lie in its vector, PyTorch's order:
 * fc1.0 (hidden x in weight, bias), fc1.1 (BatchNorm weight, bias), fc
 * (D x hidden weight, bias). Its BatchNorm always uses batch statistics, so
 * it has no running statistics to keep. */
typedef struct {
    int in, hidden, D;
    size_t w1, b1, gamma, beta, w2, b2, total;
} gen_layout;

typedef struct {
    gen_layout g;
    float *params;     /* the generator's parameters (g.total) */
    float *adam_m, *adam_v;
    int adam_steps;
    int C, D, noise;
    size_t head;       /* the offset of the model's last layer (C x D weight, C biases) */
    double *label_cdf; /* C: the share of every client's training samples with a label <= c */
} fedgen_state;

/* One generator batch: its input, the activations the backward reads, the labels. */
typedef struct {
    int B;
    float *input;             /* B x in: the noise, then the label's one-hot */
    float *a, *bn, *r, *z;    /* B x hidden, B x hidden, B x hidden, B x D */
    float *mean, *var, *invstd; /* hidden each */
    float *dr, *dbn, *da, *dz;  /* B x hidden (three), B x D */
    uint8_t *labels;
} gen_batch;

static gen_layout gen_layout_of(int in, int hidden, int D) {
    gen_layout g = {in, hidden, D, 0, 0, 0, 0, 0, 0, 0};
    g.b1 = g.w1 + (size_t)hidden * (size_t)in;
    g.gamma = g.b1 + (size_t)hidden;
    g.beta = g.gamma + (size_t)hidden;
    g.w2 = g.beta + (size_t)hidden;
    g.b2 = g.w2 + (size_t)D * (size_t)hidden;
    g.total = g.b2 + (size_t)D;
    return g;
}

/* nn.Linear's uniform +-1/sqrt(fan_in) for weights and biases, BatchNorm's 1 and 0. */
static void gen_init(const gen_layout *g, float *p, pfl_rng *rng) {
    const double bound1 = 1.0 / sqrt((double)g->in), bound2 = 1.0 / sqrt((double)g->hidden);
    for (size_t i = g->w1; i < g->gamma; i++) p[i] = (float)((2.0 * pfl_rng_uniform(rng) - 1.0) * bound1);
    for (size_t i = g->gamma; i < g->beta; i++) p[i] = 1.0f;
    for (size_t i = g->beta; i < g->w2; i++) p[i] = 0.0f;
    for (size_t i = g->w2; i < g->total; i++) p[i] = (float)((2.0 * pfl_rng_uniform(rng) - 1.0) * bound2);
}

/* z = fc(ReLU(BatchNorm(fc1(input)))), batch statistics. */
static void gen_forward(const gen_layout *g, const float *p, gen_batch *b) {
    const int B = b->B, H = g->hidden;
    pfl_linear_forward(b->a, b->input, p + g->w1, p + g->b1, B, g->in, H);
    pfl_batchnorm_forward_train(b->bn, b->mean, b->var, b->invstd, b->a, p + g->gamma, p + g->beta, B, H, 1);
    pfl_relu_forward(b->r, b->bn, (long)B * H);
    pfl_linear_forward(b->z, b->r, p + g->w2, p + g->b2, B, H, g->D);
}

/* Adds into grad the gradient of the loss whose gradient wrt z is b->dz. */
static void gen_backward(const gen_layout *g, const float *p, gen_batch *b, float *grad) {
    const int B = b->B, H = g->hidden;
    pfl_linear_backward(b->dr, grad + g->w2, grad + g->b2, b->dz, b->r, p + g->w2, B, H, g->D);
    pfl_relu_backward(b->dbn, b->dr, b->r, (long)B * H);
    pfl_batchnorm_backward(b->da, grad + g->gamma, grad + g->beta, b->dbn, b->a, p + g->gamma, b->mean, b->invstd,
                           B, H, 1, true);
    pfl_linear_backward(NULL, grad + g->w1, grad + g->b1, b->da, b->input, p + g->w1, B, g->in, H);
}

/* The head must be the model's last operation, one Linear with bias. */
static int head_offset(const pfl_model *m, size_t *offset) {
    const pfl_op *last = &m->ops[m->num_ops - 1];
    const int L = m->num_layers;
    if (L < 2 || last->kind != PFL_OP_LINEAR || last->layer != L - 1 ||
        m->layers[L - 1].length != (size_t)m->classes * (size_t)(pfl_model_layer_input_size(m, L - 1) + 1))
        return pfl_err("fedgen: model %s does not end in one linear layer with a bias under the features it "
                       "generates",
                       m->name);
    *offset = m->layers[L - 1].offset;
    return 0;
}

static int label_shares(const pfl_fl *fl, double *cdf, int C) {
    for (int c = 0; c < C; c++) cdf[c] = 0.0;
    double total = 0.0;
    for (int k = 0; k < fl->part->num_clients; k++) {
        const pfl_client_data *cd = &fl->part->clients[k];
        for (int i = 0; i < cd->n_train; i++) cdf[fl->data->labels[cd->train[i]]] += 1.0, total += 1.0;
    }
    if (total == 0.0) return pfl_err("fedgen: the clients hold no training sample to draw labels from");
    for (int c = 1; c < C; c++) cdf[c] += cdf[c - 1];
    for (int c = 0; c < C; c++) cdf[c] /= total;
    return 0;
}

static void fedgen_destroy(pfl_fl *fl) {
    fedgen_state *s = fl->algo_state;
    if (!s) return;
    free(s->params), free(s->adam_m), free(s->adam_v), free(s->label_cdf);
    free(s);
    fl->algo_state = NULL;
}

static int fedgen_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    const pfl_algo_params *a = &fl->cfg.algo;
    fedgen_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    s->C = m->classes, s->noise = a->fedgen_noise_dim;
    if (head_offset(m, &s->head)) return -1;
    s->D = (int)pfl_model_layer_input_size(m, m->num_layers - 1);
    s->g = gen_layout_of(s->noise + s->C, a->fedgen_hidden, s->D);
    const size_t P = s->g.total;
    if (!(s->params = pfl_malloc(P * sizeof(float))) || !(s->adam_m = pfl_calloc(P, sizeof(float))) ||
        !(s->adam_v = pfl_calloc(P, sizeof(float))) || !(s->label_cdf = pfl_calloc((size_t)s->C, sizeof(double))))
        return -1;
    pfl_rng init = pfl_rng_stream(fl->cfg.seed, 0, PFL_RNG_NONE, PFL_RNG_ALGO);
    gen_init(&s->g, s->params, &init);
    return label_shares(fl, s->label_cdf, s->C);
}

static void gen_batch_free(gen_batch *b) {
    free(b->input), free(b->a), free(b->bn), free(b->r), free(b->z), free(b->mean), free(b->var), free(b->invstd);
    free(b->dr), free(b->dbn), free(b->da), free(b->dz), free(b->labels);
}

static int gen_batch_make(gen_batch *b, const fedgen_state *s, int B) {
    memset(b, 0, sizeof *b);
    b->B = B;
    const size_t BH = (size_t)B * (size_t)s->g.hidden, BD = (size_t)B * (size_t)s->D, H = (size_t)s->g.hidden;
    float **per_hidden[] = {&b->a, &b->bn, &b->r, &b->dr, &b->dbn, &b->da};
    bool ok = (b->input = pfl_malloc(sizeof(float) * (size_t)B * (size_t)s->g.in)) &&
              (b->z = pfl_malloc(sizeof(float) * BD)) && (b->dz = pfl_malloc(sizeof(float) * BD)) &&
              (b->mean = pfl_malloc(sizeof(float) * H)) && (b->var = pfl_malloc(sizeof(float) * H)) &&
              (b->invstd = pfl_malloc(sizeof(float) * H)) && (b->labels = pfl_malloc((size_t)B));
    for (size_t k = 0; ok && k < sizeof per_hidden / sizeof *per_hidden; k++)
        ok = (*per_hidden[k] = pfl_malloc(sizeof(float) * BH)) != NULL;
    if (ok) return 0;
    gen_batch_free(b);
    return -1;
}

/* B labels drawn by the clients' label shares, and G's features of them
 * (B x D, in g->z): uniform noise in [0, 1) beside each one-hot. */
static const float *generate(const fedgen_state *s, gen_batch *g, pfl_rng *rng) {
    const int width = s->g.in;
    for (int i = 0; i < g->B; i++) {
        const double u = pfl_rng_uniform(rng);
        int c = 0;
        while (c < s->C - 1 && u >= s->label_cdf[c]) c++;
        g->labels[i] = (uint8_t)c;
    }
    for (int i = 0; i < g->B; i++) {
        float *row = g->input + (size_t)i * (size_t)width;
        for (int j = 0; j < s->noise; j++) row[j] = (float)pfl_rng_uniform(rng);
        memset(row + s->noise, 0, sizeof(float) * (size_t)s->C);
        row[s->noise + g->labels[i]] = 1.0f;
    }
    gen_forward(&s->g, s->params, g);
    return g->z;
}

double pfl_fedgen_head_loss(const float *head, const float *z, const uint8_t *y, int B, int D, int C, float *dhead,
                            float *dz) {
    const float *W = head, *bias = head + (size_t)C * (size_t)D;
    double total = 0.0;
    double logit[256], p[256]; /* labels are bytes: at most 256 classes */
    for (int i = 0; i < B; i++) {
        const float *zi = z + (size_t)i * (size_t)D;
        double top = -INFINITY, sum = 0.0;
        for (int c = 0; c < C; c++) {
            double v = bias[c];
            for (int j = 0; j < D; j++) v += (double)W[(size_t)c * D + j] * zi[j];
            logit[c] = v, top = fmax(top, v);
        }
        for (int c = 0; c < C; c++) sum += (p[c] = exp(logit[c] - top));
        total += log(sum) + top - logit[y[i]];
        for (int c = 0; c < C; c++) {
            const double g = (p[c] / sum - (c == y[i])) / B;
            if (dhead) {
                for (int j = 0; j < D; j++) dhead[(size_t)c * D + j] += (float)(g * zi[j]);
                dhead[(size_t)C * D + c] += (float)g;
            }
            if (dz)
                for (int j = 0; j < D; j++) dz[(size_t)i * D + j] += (float)(g * W[(size_t)c * D + j]);
        }
    }
    return total / B;
}

/* ---- the client: its head on G's features ---- */

typedef struct {
    const fedgen_state *s;
    gen_batch g;
    pfl_rng rng;
} client_term;

/* CE(head(G(y')), y'): the head's gradient goes straight into the model's
 * (the term reads none of the batch's logits, so dz stays 0). */
static double generated_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)dz, (void)correct;
    client_term *t = ctx;
    const fedgen_state *s = t->s;
    const float *z = generate(s, &t->g, &t->rng);
    return pfl_fedgen_head_loss(b->params + s->head, z, t->g.labels, t->g.B, s->D, s->C, b->grads + s->head, NULL);
}

static void fedgen_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const fedgen_state *s = fl->algo_state;
    client_term t = {.s = s, .rng = pfl_rng_stream(fl->cfg.seed, fl->round, client, PFL_RNG_ALGO)};
    if (gen_batch_make(&t.g, s, fl->cfg.batch)) return; /* out of memory: this client does not train */
    pfl_step step = pfl_step_default(fl);
    const pfl_loss_term gen = {.name = "fedgen's generated features",
                               .at = PFL_AT_LOGITS,
                               .weight = 1.0f,
                               .value = generated_term,
                               .ctx = &t};
    pfl_step_add_term(&step, &gen);
    pfl_step_run(fl, client, w, model, &step, stats);
    gen_batch_free(&t.g);
}

/* ---- the server: FedAvg's mean, then G trained against the new head ---- */

/* torch.optim.Adam (betas 0.9, 0.999, eps 1e-8, no weight decay). */
static void adam_step(float *p, const float *g, float *m, float *v, size_t n, int step, double lr) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double c1 = 1.0 - pow(b1, step), c2 = sqrt(1.0 - pow(b2, step));
    for (size_t i = 0; i < n; i++) {
        m[i] = (float)(b1 * m[i] + (1.0 - b1) * g[i]);
        v[i] = (float)(b2 * v[i] + (1.0 - b2) * (double)g[i] * g[i]);
        p[i] -= (float)(lr / c1 * m[i] / (sqrt((double)v[i]) / c2 + eps));
    }
}

/* The generator's rate this round: --fedgen-lr decayed as the clients' (PFLlib's ExponentialLR on both). */
static double generator_lr(const pfl_fl *fl) {
    const double glr = fl->cfg.algo.fedgen_lr;
    return fl->cfg.lr > 0.0f ? glr * pfl_round_lr(fl) / fl->cfg.lr : glr;
}

/* One generated batch's CE(head(G(y')), y') against the global model's
 * head, its gradient wrt G's parameters added into grad. */
static double generator_loss(const pfl_fl *fl, const fedgen_state *s, gen_batch *g, pfl_rng *rng, float *grad) {
    const float *z = generate(s, g, rng);
    memset(g->dz, 0, sizeof(float) * (size_t)g->B * (size_t)s->D);
    const double loss = pfl_fedgen_head_loss(fl->global + s->head, z, g->labels, g->B, s->D, s->C, NULL, g->dz);
    gen_backward(&s->g, s->params, g, grad);
    return loss;
}

double pfl_fedgen_generator_loss(pfl_fl *fl, pfl_rng *rng, float *grad) {
    const fedgen_state *s = fl->algo_state;
    gen_batch g;
    float *own = grad ? NULL : pfl_calloc(s->g.total, sizeof(float));
    if ((!grad && !own) || gen_batch_make(&g, s, fl->cfg.batch)) {
        free(own);
        return NAN;
    }
    const double loss = generator_loss(fl, s, &g, rng, grad ? grad : own);
    gen_batch_free(&g);
    free(own);
    return loss;
}

void pfl_fedgen_train_generator(pfl_fl *fl) {
    fedgen_state *s = fl->algo_state;
    gen_batch g;
    const size_t P = s->g.total;
    float *grad = pfl_malloc(P * sizeof(float));
    if (!grad || gen_batch_make(&g, s, fl->cfg.batch)) {
        free(grad);
        return; /* out of memory: the generator stays as it is this round */
    }
    pfl_rng rng = pfl_rng_stream(fl->cfg.seed, fl->round, PFL_RNG_NONE, PFL_RNG_ALGO);
    const double lr = generator_lr(fl);
    for (int e = 0; e < fl->cfg.algo.fedgen_server_epochs; e++) {
        memset(grad, 0, P * sizeof(float));
        generator_loss(fl, s, &g, &rng, grad);
        adam_step(s->params, grad, s->adam_m, s->adam_v, P, ++s->adam_steps, lr);
    }
    gen_batch_free(&g);
    free(grad);
}

float *pfl_fedgen_generator(pfl_fl *fl, size_t *length) {
    fedgen_state *s = fl->algo_state;
    *length = s->g.total;
    return s->params;
}

static void fedgen_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    pfl_default_aggregate(fl, clients, n, uploads);
    pfl_fedgen_train_generator(fl);
}

/* The model each way, and G to the client. */
static void fedgen_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload,
                                 uint64_t *down, uint64_t *up) {
    const fedgen_state *s = fl->algo_state;
    pfl_default_message_bytes(fl, client, sent, upload, down, up);
    *down += sizeof(float) * (uint64_t)s->g.total;
}

static int fedgen_check(const pfl_config *cfg) {
    if (cfg->modules.flayer_mask)
        return pfl_err("--flayer-mask: fedgen trains its generator on the averaged head, which is the uploads' "
                       "ensemble only when every client sends its whole head");
    return 0;
}

static int fedgen_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fedgen_state *s = fl->algo_state;
    const size_t P = s->g.total;
    return pfl_ckpt_put_f32(w, "fedgen.generator", s->params, P) ||
                   pfl_ckpt_put_f32(w, "fedgen.adam_m", s->adam_m, P) ||
                   pfl_ckpt_put_f32(w, "fedgen.adam_v", s->adam_v, P) ||
                   pfl_ckpt_put_int(w, "fedgen.adam_steps", s->adam_steps)
               ? -1
               : 0;
}

static int fedgen_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fedgen_state *s = fl->algo_state;
    const size_t P = s->g.total;
    int64_t steps;
    if (pfl_ckpt_get_f32(r, "fedgen.generator", s->params, P) ||
        pfl_ckpt_get_f32(r, "fedgen.adam_m", s->adam_m, P) || pfl_ckpt_get_f32(r, "fedgen.adam_v", s->adam_v, P) ||
        pfl_ckpt_get_int(r, "fedgen.adam_steps", &steps))
        return -1;
    if (steps < 0 || steps > (int64_t)fl->cfg.rounds * fl->cfg.algo.fedgen_server_epochs)
        return pfl_err("%s: fedgen: %lld Adam steps of the generator (at most rounds x --fedgen-server-epochs)",
                       r->path, (long long)steps);
    s->adam_steps = (int)steps;
    return 0;
}

/* PFLlib's main.py: -nd 512, -hd 512, -glr 0.005, -se 1000. */
static const pfl_param fedgen_params[] = {
    {PFL_ALGO_PARAM(INT, "fedgen-noise-dim", fedgen_noise_dim), .def = 512, .min = 1, .max = 65536, .metavar = "N",
     .help = "width of the generator's noise input"},
    {PFL_ALGO_PARAM(INT, "fedgen-hidden", fedgen_hidden), .def = 512, .min = 1, .max = 65536, .metavar = "N",
     .help = "width of the generator's hidden layer"},
    {PFL_ALGO_PARAM(FLOAT, "fedgen-lr", fedgen_lr), .def = 0.005, .max = 10, .metavar = "F",
     .help = "learning rate of the generator's Adam steps on the server"},
    {PFL_ALGO_PARAM(INT, "fedgen-server-epochs", fedgen_server_epochs), .def = 1000, .min = 0, .max = 1000000,
     .metavar = "N", .help = "generator steps on the server each round (one batch of --batch generated samples each)"},
};

const pfl_algo pfl_algo_fedgen = {
    .name = "fedgen",
    .description = "FedGen: a server-side generator of features, trained data-free on the clients' heads, "
                   "regularizes local training (--fedgen-*)",
    PFL_PARAMS(fedgen_params),
    .has_global = true,
    .create = fedgen_create,
    .check = fedgen_check,
    .destroy = fedgen_destroy,
    .local_train = fedgen_train,
    .aggregate = fedgen_aggregate,
    .message_bytes = fedgen_message_bytes,
    .save = fedgen_save,
    .load = fedgen_load,
};
