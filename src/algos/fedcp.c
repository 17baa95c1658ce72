/* FedCP (Zhang et al., KDD 2023, "FedCP: Separating Feature Information for
 * Personalized Federated Learning via Conditional Policy"). The backbone is
 * a feature extractor and a head (the last Linear layer); beside it a
 * conditional policy network (CPN) decides, per sample and per feature, how
 * much of the feature vector h goes to a personal head and how much to the
 * global one:
 *
 *   u  = h * c                      c: the client's context, the L2-normalized
 *                                   column sums of its personal head's weight
 *   r  = ReLU(LayerNorm(W u + b))   2D values, read as 2 x D
 *   (pm, gm) = Gumbel-softmax over the pair (r_d, r_{D+d}), tau 1
 *   out = head_p(h * pm) + head_g(h * gm)
 *
 * trained with cross-entropy plus lambda * MMD(h, h_base), h_base the
 * features of the received (global) extractor, frozen. The global head is
 * frozen during local training; the client uploads its extractor, the CPN
 * and 0.5 * head_p + 0.5 * head_g in the head's place (PFLlib's
 * generate_upload_head), and the server averages the three.
 *
 * Extra parameter blocks (docs/architecture.md): the personal head
 * ("fedcp.head", personal) and the CPN ("fedcp.cs.fc", "fedcp.cs.ln",
 * shared) sit after the backbone in the model vector; the backbone's own
 * output layer holds the global head. So aggregation, the client store,
 * checkpoints, MPI and message bytes need nothing of FedCP's.
 * docs/algorithms.md, "FedCP", quotes the paper and PFLlib beside this. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"


/* Rows of the layer table: the global head (the backbone's output layer)
 * and the three blocks after it. */
static int head_g_row(const pfl_model *m) { return m->num_layers - 1; }
static int head_p_row(const pfl_model *m) { return m->num_layers; }
static int fc_row(const pfl_model *m) { return m->num_layers + 1; }
static int ln_row(const pfl_model *m) { return m->num_layers + 2; }

/* D: the width of the features the output layer reads. */
static int feature_dim(const pfl_model *m) { return (int)pfl_model_layer_input_size(m, m->num_layers - 1); }

static pfl_fedcp_view view_of(const pfl_model *m, const float *v) {
    const int D = feature_dim(m), C = m->classes;
    const size_t CD = (size_t)C * D, DD = 2 * (size_t)D * D;
    const float *g = v + m->layers[head_g_row(m)].offset, *p = v + m->layers[head_p_row(m)].offset;
    const float *f = v + m->layers[fc_row(m)].offset, *l = v + m->layers[ln_row(m)].offset;
    pfl_fedcp_view view = {D, C, g, g + CD, p, p + CD, f, f + DD, l, l + 2 * (size_t)D};
    return view;
}

static pfl_fedcp_grads grads_of(const pfl_model *m, float *grads) {
    pfl_fedcp_view v = view_of(m, grads);
    pfl_fedcp_grads g = {(float *)v.wp, (float *)v.bp, (float *)v.fw, (float *)v.fb, (float *)v.lw, (float *)v.lb};
    return g;
}

void pfl_fedcp_context(const float *wp, int C, int D, float *ctx) {
    double norm = 0.0;
    for (int d = 0; d < D; d++) {
        double s = 0.0;
        for (int c = 0; c < C; c++) s += wp[(size_t)c * D + d];
        ctx[d] = (float)s, norm += s * s;
    }
    /* F.normalize: x / max(||x||, 1e-12) */
    const double scale = 1.0 / (sqrt(norm) > 1e-12 ? sqrt(norm) : 1e-12);
    for (int d = 0; d < D; d++) ctx[d] = (float)(ctx[d] * scale);
}

float pfl_fedcp_sample(const pfl_fedcp_view *v, const float *ctx, const float *h, const float *gumbel, int label,
                       float scale, float *out, float *pm, float *scratch, const pfl_fedcp_grads *g, float *dh) {
    const int D = v->D, C = v->C, K = 2 * D;
    float *u = scratch, *a = u + D, *ahat = a + K, *l = ahat + K, *dl = l + K, *ep = dl + K, *eg = ep + D;
    /* the policy: u = h * c, a = W u + b, LayerNorm, ReLU */
    for (int d = 0; d < D; d++) u[d] = h[d] * ctx[d];
    memcpy(a, v->fb, sizeof(float) * (size_t)K);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, K, D, 1.0f, v->fw, D, u, 1, 1.0f, a, 1);
    const double inv = pfl_layernorm_forward(l, ahat, a, v->lw, v->lb, K);
    /* softmax over the pair (r_d + g0_d, r_{D+d} + g1_d) is a sigmoid of their difference */
    for (int d = 0; d < D; d++) {
        const float r0 = l[d] > 0.0f ? l[d] : 0.0f, r1 = l[D + d] > 0.0f ? l[D + d] : 0.0f;
        const double s = (double)r0 - r1 + (gumbel ? (double)gumbel[d] - gumbel[D + d] : 0.0);
        pm[d] = (float)(1.0 / (1.0 + exp(-s)));
    }
    /* the two heads on the two shares of h */
    double zmax = -INFINITY;
    for (int c = 0; c < C; c++) {
        double acc = (double)v->bp[c] + v->bg[c];
        for (int d = 0; d < D; d++)
            acc += ((double)v->wp[(size_t)c * D + d] * pm[d] + (double)v->wg[(size_t)c * D + d] * (1.0f - pm[d])) * h[d];
        out[c] = (float)acc;
        zmax = acc > zmax ? acc : zmax;
    }
    double sum = 0.0;
    for (int c = 0; c < C; c++) sum += exp(out[c] - zmax);
    const float loss = (float)(log(sum) + zmax - out[label]);
    if (!g) return loss;
    /* backward: d out, the personal head, then through the gate and the policy to h */
    memset(ep, 0, sizeof(float) * 2 * (size_t)D);
    for (int c = 0; c < C; c++) {
        const float dz = (float)((exp(out[c] - zmax) / sum - (c == label)) * scale);
        g->bp[c] += dz;
        for (int d = 0; d < D; d++) {
            g->wp[(size_t)c * D + d] += dz * h[d] * pm[d];
            ep[d] += v->wp[(size_t)c * D + d] * dz;
            eg[d] += v->wg[(size_t)c * D + d] * dz;
        }
    }
    for (int d = 0; d < D; d++) {
        const float gm = 1.0f - pm[d];
        dh[d] += ep[d] * pm[d] + eg[d] * gm;
        const float ds = (ep[d] - eg[d]) * h[d] * pm[d] * gm; /* d pm / d s = pm gm, and gm = 1 - pm */
        dl[d] = l[d] > 0.0f ? ds : 0.0f;
        dl[D + d] = l[D + d] > 0.0f ? -ds : 0.0f;
    }
    pfl_layernorm_backward(dl, g->lw, g->lb, ahat, inv, v->lw, K); /* now d a */
    for (int k = 0; k < K; k++) g->fb[k] += dl[k];
    cblas_sger(CblasRowMajor, K, D, 1.0f, dl, 1, u, 1, g->fw, D);
    float *du = a; /* a is no longer needed */
    cblas_sgemv(CblasRowMajor, CblasTrans, K, D, 1.0f, v->fw, D, dl, 1, 0.0f, du, 1);
    for (int d = 0; d < D; d++) dh[d] += du[d] * ctx[d]; /* the context is held fixed (detached) */
    return loss;
}

/* PFLlib's rbf kernel sums four bandwidths: exp(-0.5 |a - b|^2 / s). */
static const double mmd_bandwidths[] = {10.0, 15.0, 20.0, 50.0};

static double sq_dist(const float *a, const float *b, int D) {
    double s = 0.0;
    for (int d = 0; d < D; d++) s += ((double)a[d] - b[d]) * ((double)a[d] - b[d]);
    return s;
}

float pfl_fedcp_mmd(const float *x, const float *y, int B, int D, float weight, float *dx) {
    double mmd = 0.0;
    const double per = 1.0 / ((double)B * B);
    for (int i = 0; i < B; i++)
        for (int j = 0; j < B; j++) {
            const double dxx = sq_dist(x + (size_t)i * D, x + (size_t)j * D, D);
            const double dyy = sq_dist(y + (size_t)i * D, y + (size_t)j * D, D);
            const double dxy = sq_dist(x + (size_t)i * D, y + (size_t)j * D, D);
            double kxx = 0.0, kxy = 0.0; /* sum over bandwidths of K / s, for the gradient */
            for (int b = 0; b < 4; b++) {
                const double s = mmd_bandwidths[b], ex = exp(-0.5 * dxx / s), ey = exp(-0.5 * dxy / s);
                mmd += per * (ex + exp(-0.5 * dyy / s) - 2.0 * ey);
                kxx += ex / s, kxy += ey / s;
            }
            if (!dx) continue;
            /* d/dx_i: 2 sum_j K(x_i,x_j) (-(x_i - x_j)/s) - 2 sum_j K(x_i,y_j) (-(x_i - y_j)/s) */
            float *g = dx + (size_t)i * D;
            const float *xi = x + (size_t)i * D, *xj = x + (size_t)j * D, *yj = y + (size_t)j * D;
            for (int d = 0; d < D; d++)
                g[d] += (float)(weight * per * 2.0 * (-kxx * ((double)xi[d] - xj[d]) + kxy * ((double)xi[d] - yj[d])));
        }
    return (float)(weight * mmd);
}

/* ---- the blocks ---- */

static int fedcp_blocks(const pfl_config *cfg, pfl_model *m) {
    (void)cfg;
    const pfl_op *last = &m->ops[m->num_ops - 1];
    if (last->kind != PFL_OP_LINEAR || last->layer != m->num_layers - 1 || m->layers[last->layer].num_tensors != 2)
        return pfl_err("fedcp: model %s: the policy needs a network ending in a Linear layer with bias", m->name);
    const int D = feature_dim(m), C = m->classes;
    const pfl_block_tensor head[] = {{"head_p.weight", 2, {C, D}}, {"head_p.bias", 1, {C}}};
    const pfl_block_tensor fc[] = {{"cs.fc.0.weight", 2, {2 * D, D}}, {"cs.fc.0.bias", 1, {2 * D}}};
    const pfl_block_tensor ln[] = {{"cs.fc.1.weight", 1, {2 * D}}, {"cs.fc.1.bias", 1, {2 * D}}};
    /* the personal head starts as the global one (fedcp_create copies it) */
    return pfl_model_add_block(m, "fedcp.head", true, PFL_INIT_ZERO, 2, head) ||
                   pfl_model_add_block(m, "fedcp.cs.fc", false, PFL_INIT_UNIFORM, 2, fc) ||
                   pfl_model_add_block(m, "fedcp.cs.ln", false, PFL_INIT_BATCHNORM, 2, ln)
               ? -1
               : 0;
}

/* PFLlib: every client's model is a copy of one model, so each personal
 * head starts as the initial global head. */
static int fedcp_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    memcpy(fl->global + m->layers[head_p_row(m)].offset, fl->global + m->layers[head_g_row(m)].offset,
           m->layers[head_g_row(m)].length * sizeof(float));
    return 0;
}

/* What a client receives: the global model (extractor, global head,
 * policy) with its own personal head. */
static void fedcp_receive(pfl_fl *fl, int client, const float *state, float *received) {
    (void)client;
    const pfl_model *m = fl->model;
    const pfl_layer *p = &m->layers[head_p_row(m)];
    memcpy(received, fl->global, pfl_model_vector_len(m) * sizeof(float));
    memcpy(received + p->offset, state + p->offset, p->length * sizeof(float));
}

/* ---- local training ---- */

typedef struct {
    float *ctx, *gumbel, *scratch, *out, *pm;
} fedcp_buffers;

static float *buffers_alloc(fedcp_buffers *b, int D, int C) {
    float *p = pfl_malloc(sizeof(float) * (16 * (size_t)D + (size_t)C));
    if (!p) return NULL;
    b->ctx = p, b->gumbel = b->ctx + D, b->scratch = b->gumbel + 2 * D, b->pm = b->scratch + 12 * (size_t)D;
    b->out = b->pm + D;
    return p;
}

/* Gumbel(0, 1) noise as torch's gumbel_softmax draws it: -log(E), E ~ Exp(1). */
static void draw_gumbel(pfl_rng *rng, float *g, int n) {
    for (int i = 0; i < n; i++) {
        double e = -log(1.0 - pfl_rng_uniform(rng));
        g[i] = (float)-log(e > 1e-30 ? e : 1e-30);
    }
}

typedef struct {
    const pfl_fl *fl;
    fedcp_buffers b;
    pfl_rng noise;
} fedcp_term;

/* FedCP's loss on the features h entering the global head, the network's
 * output: per sample the policy routes h to both heads (with Gumbel
 * noise), plus lambda MMD(h, h_base), h_base the received extractor's
 * features (the term's reference, run in training mode first). Its value,
 * the gradients of the blocks (into b->grads) and of h (dz). */
static double fedcp_loss_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    fedcp_term *t = ctx;
    const pfl_model *m = t->fl->model;
    const int D = feature_dim(m), C = m->classes, B = b->B;
    const pfl_fedcp_view v = view_of(m, b->params);
    const pfl_fedcp_grads g = grads_of(m, b->grads);
    double loss = 0.0;
    *correct = 0;
    for (int n = 0; n < B; n++) {
        draw_gumbel(&t->noise, t->b.gumbel, 2 * D);
        loss += pfl_fedcp_sample(&v, t->b.ctx, b->z + (size_t)n * D, t->b.gumbel, b->labels[n], 1.0f / B, t->b.out,
                                 t->b.pm, t->b.scratch, &g, dz + (size_t)n * D);
        *correct += pfl_argmax(t->b.out, C) == b->labels[n];
    }
    return (float)(loss / B + pfl_fedcp_mmd(b->z, b->refs[0], B, D, t->fl->cfg.algo.fedcp_lambda, dz));
}

/* The step: FedCP's loss alone (no cross-entropy on the backbone's logits);
 * SGD on every row but the global head, which is frozen (PFLlib:
 * requires_grad False). */
static void fedcp_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_model *m = fl->model;
    fedcp_term t = {.fl = fl, .noise = pfl_rng_stream(fl->cfg.seed, fl->round, client, PFL_RNG_ALGO)};
    float *mem = buffers_alloc(&t.b, feature_dim(m), m->classes);
    if (!mem) return; /* out of memory: this client does not train */
    /* the received extractor, frozen: PFLlib's `base` */
    float *base = w->aux;
    memcpy(base, model, pfl_model_vector_len(m) * sizeof(float));
    /* the context of this round: from the personal head as the last round left it */
    pfl_fedcp_context(view_of(m, model).wp, m->classes, feature_dim(m), t.b.ctx);
    pfl_step s = pfl_step_default(fl);
    s.ce_weight = 0.0;
    const pfl_loss_term term = {.name = "fedcp's policy and heads", .at = head_g_row(m), .weight = 1.0f,
                                .refs = {base}, .num_refs = 1, .refs_train = true,
                                .value = fedcp_loss_term, .ctx = &t, .predicts = true};
    pfl_step_add_term(&s, &term);
    bool frozen[PFL_MAX_LAYERS] = {false};
    frozen[head_g_row(m)] = true;
    s.opt.frozen = frozen;
    pfl_step_run(fl, client, w, model, &s, stats);
    free(mem);
}

/* PFLlib's generate_upload_head: the head's place carries 0.5 head_p + 0.5 head_g. */
static void fedcp_upload(pfl_fl *fl, int client, const float *model, float *upload) {
    (void)client;
    const pfl_model *m = fl->model;
    memcpy(upload, model, pfl_model_vector_len(m) * sizeof(float));
    const pfl_layer *g = &m->layers[head_g_row(m)], *p = &m->layers[head_p_row(m)];
    for (size_t j = 0; j < g->length; j++) upload[g->offset + j] = 0.5f * model[p->offset + j] + 0.5f * model[g->offset + j];
}

/* The personalized model's output: the policy routes each test sample's
 * features to the two heads, without Gumbel noise (docs/algorithms.md). */
static int fedcp_personal_correct(const pfl_fl *fl, pfl_exec *x, const float *params) {
    const pfl_model *m = fl->model;
    const int D = feature_dim(m), C = m->classes, B = x->batch;
    fedcp_buffers b;
    float *mem = buffers_alloc(&b, D, C), *h = pfl_malloc(sizeof(float) * (size_t)B * D);
    int correct = 0;
    if (mem && h) {
        const pfl_fedcp_view v = view_of(m, params);
        pfl_fedcp_context(v.wp, C, D, b.ctx);
        const float *z = pfl_exec_features(x, head_g_row(m), h);
        const uint8_t *labels = pfl_exec_labels(x);
        for (int n = 0; n < B; n++) {
            pfl_fedcp_sample(&v, b.ctx, z + (size_t)n * D, NULL, labels[n], 1.0f, b.out, b.pm, b.scratch, NULL, NULL);
            correct += pfl_argmax(b.out, C) == labels[n];
        }
    }
    free(mem), free(h);
    return correct;
}

/* The parameters FedCP adds: the policy network (shared) and a personal head per client. */
static void fedcp_report(const pfl_fl *fl, FILE *f, int what) {
    const pfl_model *m = fl->model;
    if (what != PFL_REPORT_SUMMARY) return;
    fprintf(f, ",\n  \"extra_params_shared\": %zu", m->layers[fc_row(m)].length + m->layers[ln_row(m)].length);
    fprintf(f, ",\n  \"extra_params_per_client\": %zu", m->layers[head_p_row(m)].length);
}

/* The authors' run script (TsingZ0/FedCP, system/run_me.sh: "-m cnn -algo FedCP ... -lam 5", the 4-layer CNN
 * on MNIST Dir(0.1)), as GPFL's defaults come from its authors' script; PFLlib's main.py has -lam 1.0, a
 * default many of its methods share. */
static const pfl_param fedcp_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "fedcp-lambda", fedcp_lambda), .def = 5.0, .max = 1e6, .metavar = "F",
     .help = "weight lambda of the MMD between the trained and the received extractor's features"},
};

/* ALA learns its mixing weights by the loss of the backbone's own output,
 * head_g(h); FedCP's output routes h through the policy to both heads, so
 * the weights would serve a network FedCP never runs. */
static int fedcp_check(const pfl_config *cfg) {
    if (cfg->modules.ala)
        return pfl_err("--ala: fedcp's output is its policy's mix of a personal and a global head, "
                       "head_p(h*pm) + head_g(h*gm); ALA learns its weights on the backbone's own output head_g(h), "
                       "a network fedcp never runs");
    return 0;
}

const pfl_algo pfl_algo_fedcp = {
    .name = "fedcp",
    .description = "FedCP: a conditional policy routes each sample's features to a personal and a global head",
    PFL_PARAMS(fedcp_params),
    .has_global = true,
    .stateful = true,
    .personal = pfl_personal_unshared, /* the personal head block */
    .blocks = fedcp_blocks,
    .check = fedcp_check,
    .create = fedcp_create,
    .receive = fedcp_receive,
    .local_train = fedcp_train,
    .upload = fedcp_upload,
    .personal_correct = fedcp_personal_correct,
    .report = fedcp_report,
};
