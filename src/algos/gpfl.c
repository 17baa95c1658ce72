/* GPFL (Zhang et al., ICCV 2023, "GPFL: Simultaneously Learning Global and
 * Personalized Feature Information for Personalized Federated Learning"),
 * as its authors' code has it (TsingZ0/GPFL and PFLlib: clientgpfl.py,
 * servergpfl.py). The backbone is a feature extractor and a head (its last
 * Linear layer, which stays with each client). Between them a Conditional
 * Valve (CoV) turns the features h into two vectors, one per condition:
 *
 *   gamma(c) = LN(ReLU(W_g c + b_g)),  beta(c) = LN(ReLU(W_b c + b_b))
 *   CoV(h, c) = ReLU(h * (1 + gamma(c)) + beta(c))
 *
 * with a client's personalized condition p_i (its class frequencies times
 * the category embeddings) and the generic condition g (their mean). The
 * personalized features feed the head; the generic ones are pulled to the
 * Global Category Embeddings (GCE, C x D): at the angle level a softmax
 * over their cosines, at the magnitude level lambda ||f_G - e_y|| toward
 * the embeddings as received. The local loss
 *
 *   CE(head(CoV(h, p_i)), y) + angle(CoV(h, g), y) + lambda ||CoV(h, g) - e_y||
 *
 * trains the backbone, CoV and GCE by SGD at --lr, CoV and GCE with weight
 * decay mu. After training a client computes its next conditions from the
 * GCE it trained (PFLlib's set_GCE). The server averages the extractor, CoV
 * and GCE; head and conditions never leave the client.
 *
 * Extra parameter blocks (docs/architecture.md): the GCE and the CoV's two
 * nets (shared) and the two conditions (personal) sit after the backbone in
 * the model vector; the head is the backbone's output layer, marked not
 * shared. docs/algorithms.md, "GPFL", says where pfl and the reference differ. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

#define NORMALIZE_EPS 1e-12 /* F.normalize's default */

/* Rows of the layer table: the head (the backbone's output layer) and the
 * blocks after the backbone, in the order gpfl_blocks appends them. */
static int head_row(const pfl_model *m) { return m->num_layers - 1; }
static int gce_row(const pfl_model *m) { return m->num_layers; }
static int gamma_fc_row(const pfl_model *m) { return m->num_layers + 1; }
static int gamma_ln_row(const pfl_model *m) { return m->num_layers + 2; }
static int beta_fc_row(const pfl_model *m) { return m->num_layers + 3; }
static int beta_ln_row(const pfl_model *m) { return m->num_layers + 4; }
static int cond_row(const pfl_model *m) { return m->num_layers + 5; }

/* D: the width of the features the head reads. */
static int feature_dim(const pfl_model *m) { return (int)pfl_model_layer_input_size(m, m->num_layers - 1); }

static const float *at(const pfl_model *m, const float *v, int row) { return v + m->layers[row].offset; }

static pfl_gpfl_net net_at(const pfl_model *m, const float *v, int fc, int ln) {
    const size_t D = (size_t)feature_dim(m);
    const pfl_gpfl_net n = {at(m, v, fc), at(m, v, fc) + D * D, at(m, v, ln), at(m, v, ln) + D};
    return n;
}

static pfl_gpfl_view view_of(const pfl_model *m, const float *v) {
    const int D = feature_dim(m), C = m->classes;
    const float *head = at(m, v, head_row(m)), *cond = at(m, v, cond_row(m));
    const pfl_gpfl_view view = {D,
                                C,
                                head,
                                head + (size_t)C * D,
                                at(m, v, gce_row(m)),
                                net_at(m, v, gamma_fc_row(m), gamma_ln_row(m)),
                                net_at(m, v, beta_fc_row(m), beta_ln_row(m)),
                                cond,
                                cond + D};
    return view;
}

static pfl_gpfl_net_grads net_grads(pfl_gpfl_net n) {
    const pfl_gpfl_net_grads g = {(float *)n.w, (float *)n.b, (float *)n.ln_w, (float *)n.ln_b};
    return g;
}

static pfl_gpfl_grads grads_of(const pfl_model *m, float *grads) {
    const pfl_gpfl_view v = view_of(m, grads);
    const pfl_gpfl_grads g = {(float *)v.head_w, (float *)v.head_b, (float *)v.emb, net_grads(v.gamma),
                              net_grads(v.beta)};
    return g;
}

/* ---- the pieces (algos.h), which the tests check by hand ---- */

void pfl_gpfl_condition(const float *emb, const float *weight, int C, int D, float *cond) {
    for (int d = 0; d < D; d++) {
        double s = 0.0;
        for (int c = 0; c < C; c++) s += (double)weight[c] * emb[(size_t)c * D + d];
        cond[d] = (float)s;
    }
}

/* What one conditional net keeps for its backward: ReLU(W c + b) (D), the
 * normalized values (D) and 1 / sqrt(var + eps). */
#define NET_KEEP(D) (2 * (size_t)(D) + 1)

/* out = LN(ReLU(W c + b)) (nn.Sequential(Linear, ReLU, LayerNorm)). */
static void net_forward(const pfl_gpfl_net *n, const float *c, int D, float *out, float *keep) {
    float *r = keep, *hat = keep + D;
    memcpy(r, n->b, sizeof(float) * (size_t)D);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, D, D, 1.0f, n->w, D, c, 1, 1.0f, r, 1);
    for (int d = 0; d < D; d++) r[d] = r[d] > 0.0f ? r[d] : 0.0f;
    keep[2 * D] = (float)pfl_layernorm_forward(out, hat, r, n->ln_w, n->ln_b, D);
}

/* From d out (D, overwritten) into the net's parameters; the condition is a
 * constant (PFLlib sets it from .data: no gradient reaches the embeddings). */
static void net_backward(const pfl_gpfl_net *n, const float *c, int D, const float *keep, float *dout,
                         const pfl_gpfl_net_grads *g) {
    const float *r = keep, *hat = keep + D;
    pfl_layernorm_backward(dout, g->ln_w, g->ln_b, hat, keep[2 * D], n->ln_w, D); /* now d ReLU(a) */
    for (int d = 0; d < D; d++) {
        dout[d] = r[d] > 0.0f ? dout[d] : 0.0f; /* now d a */
        g->b[d] += dout[d];
    }
    cblas_sger(CblasRowMajor, D, D, 1.0f, dout, 1, c, 1, g->w, D);
}

/* The valve of one condition: gamma and beta (D each) and both nets' keeps. */
typedef struct {
    float *gamma, *beta, *keep_g, *keep_b;
} valve;

#define VALVE_FLOATS(D) (2 * (size_t)(D) + 2 * NET_KEEP(D))

static valve valve_prepare(const pfl_gpfl_view *v, const float *cond, float *mem) {
    const int D = v->D;
    valve s = {mem, mem + D, mem + 2 * D, mem + 2 * D + NET_KEEP(D)};
    net_forward(&v->gamma, cond, D, s.gamma, s.keep_g);
    net_forward(&v->beta, cond, D, s.beta, s.keep_b);
    return s;
}

/* CoV's forward: out = ReLU(h * (1 + gamma) + beta), B rows of D. */
static void valve_apply(const valve *s, const float *h, int B, int D, float *out) {
    for (int n = 0; n < B; n++)
        for (int d = 0; d < D; d++) {
            const size_t i = (size_t)n * D + d;
            const float pre = h[i] * (s->gamma[d] + 1.0f) + s->beta[d];
            out[i] = pre > 0.0f ? pre : 0.0f;
        }
}

/* From d out (B x D) of valve_apply: adds into dh and the nets' gradients.
 * tmp: 2D floats. */
static void valve_backward(const pfl_gpfl_view *v, const float *cond, const valve *s, const float *h,
                           const float *out, const float *dout, int B, const pfl_gpfl_grads *g, float *dh,
                           float *tmp) {
    const int D = v->D;
    float *dgamma = tmp, *dbeta = tmp + D;
    memset(tmp, 0, sizeof(float) * 2 * (size_t)D);
    for (int n = 0; n < B; n++)
        for (int d = 0; d < D; d++) {
            const size_t i = (size_t)n * D + d;
            if (out[i] <= 0.0f) continue; /* ReLU: out > 0 exactly where its input is */
            dh[i] += dout[i] * (s->gamma[d] + 1.0f);
            dgamma[d] += dout[i] * h[i];
            dbeta[d] += dout[i];
        }
    net_backward(&v->gamma, cond, D, s->keep_g, dgamma, &g->gamma);
    net_backward(&v->beta, cond, D, s->keep_b, dbeta, &g->beta);
}

void pfl_gpfl_valve(const pfl_gpfl_view *v, const float *cond, const float *h, int B, float *out, float *scratch) {
    const valve s = valve_prepare(v, cond, scratch);
    valve_apply(&s, h, B, v->D, out);
}

/* F.normalize of a D-vector: x / max(||x||, eps); returns that divisor. */
static double normalize(const float *x, int D, float *out) {
    double sq = 0.0;
    for (int d = 0; d < D; d++) sq += (double)x[d] * x[d];
    const double norm = sqrt(sq) > NORMALIZE_EPS ? sqrt(sq) : NORMALIZE_EPS;
    for (int d = 0; d < D; d++) out[d] = (float)(x[d] / norm);
    return norm;
}

/* The gradient through normalize: dx += (du - u <u, du>) / ||x|| when the
 * norm exceeded eps, else du / eps (u = x / eps there). */
static void normalize_backward(const float *u, const float *du, double norm, int D, float *dx) {
    double dot = 0.0;
    if (norm > NORMALIZE_EPS)
        for (int d = 0; d < D; d++) dot += (double)u[d] * du[d];
    for (int d = 0; d < D; d++) dx[d] += (float)((du[d] - u[d] * dot) / norm);
}

size_t pfl_gpfl_angle_scratch(int C, int D) { return 2 * (size_t)C * D + 2 * (size_t)C + 2 * (size_t)D; }

float pfl_gpfl_angle_loss(const float *x, const float *emb, const uint8_t *y, int B, int C, int D, float *dx,
                          float *demb, float *scratch) {
    float *en = scratch, *den = en + (size_t)C * D, *enorm = den + (size_t)C * D, *cosv = enorm + C;
    float *xn = cosv + C, *dxn = xn + D;
    for (int c = 0; c < C; c++) enorm[c] = (float)normalize(emb + (size_t)c * D, D, en + (size_t)c * D);
    if (demb) memset(den, 0, sizeof(float) * (size_t)C * D);
    double loss = 0.0;
    for (int n = 0; n < B; n++) {
        const double xnorm = normalize(x + (size_t)n * D, D, xn);
        double zmax = -INFINITY, sum = 0.0;
        for (int c = 0; c < C; c++) {
            double dot = 0.0;
            for (int d = 0; d < D; d++) dot += (double)xn[d] * en[(size_t)c * D + d];
            cosv[c] = (float)dot, zmax = dot > zmax ? dot : zmax;
        }
        for (int c = 0; c < C; c++) sum += exp(cosv[c] - zmax);
        loss += log(sum) + zmax - cosv[y[n]];
        if (!dx) continue;
        memset(dxn, 0, sizeof(float) * (size_t)D);
        for (int c = 0; c < C; c++) {
            const float dcos = (float)((exp(cosv[c] - zmax) / sum - (c == y[n])) / B);
            for (int d = 0; d < D; d++) {
                dxn[d] += dcos * en[(size_t)c * D + d];
                if (demb) den[(size_t)c * D + d] += dcos * xn[d];
            }
        }
        normalize_backward(xn, dxn, xnorm, D, dx + (size_t)n * D);
    }
    if (demb)
        for (int c = 0; c < C; c++)
            normalize_backward(en + (size_t)c * D, den + (size_t)c * D, enorm[c], D, demb + (size_t)c * D);
    return (float)(loss / B);
}

float pfl_gpfl_magnitude_loss(const float *x, const float *emb, const uint8_t *y, int B, int D, float lambda,
                              float *dx) {
    double sq = 0.0;
    for (int n = 0; n < B; n++)
        for (int d = 0; d < D; d++) {
            const double e = (double)x[(size_t)n * D + d] - emb[(size_t)y[n] * D + d];
            sq += e * e;
        }
    const double norm = sqrt(sq);
    if (dx && norm > 0.0) /* torch.norm's gradient at 0 is 0 */
        for (int n = 0; n < B; n++)
            for (int d = 0; d < D; d++)
                dx[(size_t)n * D + d] +=
                    (float)(lambda * ((double)x[(size_t)n * D + d] - emb[(size_t)y[n] * D + d]) / norm);
    return (float)(lambda * norm);
}

size_t pfl_gpfl_scratch(int B, int C, int D) {
    return 2 * VALVE_FLOATS(D) + 4 * (size_t)B * D + 2 * (size_t)D + pfl_gpfl_angle_scratch(C, D);
}

/* The head on the personalized features: logits (B x C) and the mean
 * cross-entropy; with g, its gradients into g and dfp (B x D, zeroed here). */
static double head_loss(const pfl_gpfl_view *v, const float *fp, const uint8_t *y, int B, float *logits,
                        const pfl_gpfl_grads *g, float *dfp) {
    const int D = v->D, C = v->C;
    double loss = 0.0;
    if (g) memset(dfp, 0, sizeof(float) * (size_t)B * D);
    for (int n = 0; n < B; n++) {
        const float *f = fp + (size_t)n * D;
        float *z = logits + (size_t)n * C;
        double zmax = -INFINITY, sum = 0.0;
        for (int c = 0; c < C; c++) {
            double acc = v->head_b[c];
            for (int d = 0; d < D; d++) acc += (double)v->head_w[(size_t)c * D + d] * f[d];
            z[c] = (float)acc, zmax = acc > zmax ? acc : zmax;
        }
        for (int c = 0; c < C; c++) sum += exp(z[c] - zmax);
        loss += log(sum) + zmax - z[y[n]];
        if (!g) continue;
        for (int c = 0; c < C; c++) {
            const float dz = (float)((exp(z[c] - zmax) / sum - (c == y[n])) / B);
            g->head_b[c] += dz;
            for (int d = 0; d < D; d++) {
                g->head_w[(size_t)c * D + d] += dz * f[d];
                dfp[(size_t)n * D + d] += v->head_w[(size_t)c * D + d] * dz;
            }
        }
    }
    return loss / B;
}

float pfl_gpfl_loss(const pfl_gpfl_view *v, const float *emb_frozen, float lambda, const float *h, const uint8_t *y,
                    int B, float *logits, const pfl_gpfl_grads *g, float *dh, float *scratch) {
    const int D = v->D, C = v->C;
    const size_t BD = (size_t)B * D;
    float *fp = scratch + 2 * VALVE_FLOATS(D), *fg = fp + BD, *dfp = fg + BD, *dfg = dfp + BD, *tmp = dfg + BD;
    float *angle_scratch = tmp + 2 * D;
    const valve vp = valve_prepare(v, v->cond_p, scratch), vg = valve_prepare(v, v->cond_g, scratch + VALVE_FLOATS(D));
    valve_apply(&vp, h, B, D, fp);
    valve_apply(&vg, h, B, D, fg);
    /* the personalized task route and the global guidance route */
    double loss = head_loss(v, fp, y, B, logits, g, dfp);
    if (g) memset(dfg, 0, sizeof(float) * BD);
    loss += pfl_gpfl_angle_loss(fg, v->emb, y, B, C, D, g ? dfg : NULL, g ? g->emb : NULL, angle_scratch);
    loss += pfl_gpfl_magnitude_loss(fg, emb_frozen, y, B, D, lambda, g ? dfg : NULL);
    if (g) {
        valve_backward(v, v->cond_p, &vp, h, fp, dfp, B, g, dh, tmp);
        valve_backward(v, v->cond_g, &vg, h, fg, dfg, B, g, dh, tmp);
    }
    return (float)loss;
}

/* ---- the blocks ---- */

static int gpfl_blocks(const pfl_config *cfg, pfl_model *m) {
    (void)cfg;
    const pfl_op *last = &m->ops[m->num_ops - 1];
    if (last->kind != PFL_OP_LINEAR || last->layer != m->num_layers - 1 || m->layers[last->layer].num_tensors != 2)
        return pfl_err("gpfl: model %s: the valve needs a network ending in a Linear layer with bias", m->name);
    const int D = feature_dim(m), C = m->classes;
    const pfl_block_tensor gce[] = {{"GCE.embedding.weight", 2, {C, D}}};
    const pfl_block_tensor gamma_fc[] = {{"CoV.Conditional_gamma.0.weight", 2, {D, D}},
                                         {"CoV.Conditional_gamma.0.bias", 1, {D}}};
    const pfl_block_tensor gamma_ln[] = {{"CoV.Conditional_gamma.2.weight", 1, {D}},
                                         {"CoV.Conditional_gamma.2.bias", 1, {D}}};
    const pfl_block_tensor beta_fc[] = {{"CoV.Conditional_beta.0.weight", 2, {D, D}},
                                        {"CoV.Conditional_beta.0.bias", 1, {D}}};
    const pfl_block_tensor beta_ln[] = {{"CoV.Conditional_beta.2.weight", 1, {D}},
                                        {"CoV.Conditional_beta.2.bias", 1, {D}}};
    /* PFLlib starts both conditions at zeros: the first round's two routes see the same valve */
    const pfl_block_tensor cond[] = {{"generic_conditional_input", 1, {D}},
                                     {"personalized_conditional_input", 1, {D}}};
    return pfl_model_add_block(m, "gpfl.gce", false, PFL_INIT_NORMAL, 1, gce) ||
                   pfl_model_add_block(m, "gpfl.cov.gamma.fc", false, PFL_INIT_UNIFORM, 2, gamma_fc) ||
                   pfl_model_add_block(m, "gpfl.cov.gamma.ln", false, PFL_INIT_BATCHNORM, 2, gamma_ln) ||
                   pfl_model_add_block(m, "gpfl.cov.beta.fc", false, PFL_INIT_UNIFORM, 2, beta_fc) ||
                   pfl_model_add_block(m, "gpfl.cov.beta.ln", false, PFL_INIT_BATCHNORM, 2, beta_ln) ||
                   pfl_model_add_block(m, "gpfl.cond", true, PFL_INIT_ZERO, 2, cond)
               ? -1
               : 0;
}

/* The head never leaves the client (PFLlib uploads and sends model.base only). */
static int gpfl_create(pfl_fl *fl) {
    fl->shared[head_row(fl->model)] = false;
    return 0;
}

/* ALA learns its weights on the backbone's own output, head(h); GPFL's
 * model is head(CoV(h, p_i)), so those weights would fit a network GPFL
 * never runs. */
static int gpfl_check(const pfl_config *cfg) {
    if (cfg->modules.ala)
        return pfl_err("--ala: gpfl's output is its head on the valve's personalized features, head(CoV(h, p_i)); "
                       "ALA learns its weights on the backbone's own output head(h), a network gpfl never runs");
    return 0;
}

/* What a client receives: the global extractor, CoV and GCE, with its own
 * head and conditions. */
static void gpfl_receive(pfl_fl *fl, int client, const float *state, float *received) {
    (void)client;
    const pfl_model *m = fl->model;
    memcpy(received, fl->global, pfl_model_vector_len(m) * sizeof(float));
    for (int l = 0; l < pfl_model_rows(m); l++)
        if (!fl->shared[l])
            memcpy(received + m->layers[l].offset, state + m->layers[l].offset, m->layers[l].length * sizeof(float));
}

/* ---- local training ---- */

typedef struct {
    const pfl_fl *fl;
    float *emb_frozen;         /* the GCE as received: the magnitude-level target (PFLlib's GCE_frozen) */
    float *logits, *scratch;
} gpfl_term;

/* GPFL's loss on the backbone's features entering its head, the network's
 * output (the head on the valve's personalized features): its value, the
 * gradients of its blocks (into b->grads) and of the features (dz). */
static double gpfl_loss_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    const gpfl_term *t = ctx;
    const pfl_model *m = t->fl->model;
    const int C = m->classes;
    const pfl_gpfl_view v = view_of(m, b->params);
    const pfl_gpfl_grads g = grads_of(m, b->grads);
    const float loss = pfl_gpfl_loss(&v, t->emb_frozen, t->fl->cfg.algo.gpfl_lambda, b->z, b->labels, b->B,
                                     t->logits, &g, dz, t->scratch);
    *correct = 0;
    for (int n = 0; n < b->B; n++) *correct += pfl_argmax(t->logits + (size_t)n * C, C) == b->labels[n];
    return loss;
}

/* PFLlib's set_GCE, for the client that just trained: the generic
 * condition is the mean of its category embeddings, the personalized one
 * their mean weighted by its share of training samples per class. */
static void update_conditions(const pfl_fl *fl, int client, float *model) {
    const pfl_model *m = fl->model;
    const pfl_client_data *cd = &fl->part->clients[client];
    const int D = feature_dim(m), C = m->classes;
    float share[256], uniform[256]; /* labels are bytes: C <= 256 */
    memset(share, 0, sizeof share);
    for (int i = 0; i < cd->n_train; i++) share[fl->data->labels[cd->train[i]]] += 1.0f;
    for (int c = 0; c < C; c++) {
        share[c] = cd->n_train > 0 ? share[c] / (float)cd->n_train : 0.0f;
        uniform[c] = 1.0f / C;
    }
    const float *emb = at(m, model, gce_row(m));
    float *cond = model + m->layers[cond_row(m)].offset;
    pfl_gpfl_condition(emb, uniform, C, D, cond);
    pfl_gpfl_condition(emb, share, C, D, cond + D);
}

/* The step: GPFL's loss alone on the features (no cross-entropy on the
 * backbone's logits); SGD on every row but the conditions, the backbone
 * (head included) as every method's local SGD, CoV and GCE with weight
 * decay mu (PFLlib's GCE_opt and CoV_opt). */
static void gpfl_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_model *m = fl->model;
    const int D = feature_dim(m), C = m->classes, B = fl->cfg.batch;
    const size_t CD = (size_t)C * D;
    float *mem = pfl_malloc(sizeof(float) * (CD + (size_t)B * C + pfl_gpfl_scratch(B, C, D)));
    if (!mem) return; /* out of memory: this client does not train */
    gpfl_term t = {.fl = fl, .emb_frozen = mem, .logits = mem + CD};
    t.scratch = t.logits + (size_t)B * C;
    memcpy(t.emb_frozen, at(m, model, gce_row(m)), CD * sizeof(float));
    pfl_step s = pfl_step_default(fl);
    s.ce_weight = 0.0;
    const pfl_loss_term term = {.name = "gpfl's valve and heads", .at = head_row(m), .weight = 1.0f,
                                .value = gpfl_loss_term, .ctx = &t, .predicts = true};
    pfl_step_add_term(&s, &term);
    bool frozen[PFL_MAX_LAYERS] = {false};
    float decay[PFL_MAX_LAYERS];
    for (int l = 0; l < pfl_model_rows(m); l++)
        decay[l] = l < m->num_layers ? fl->cfg.weight_decay : fl->cfg.algo.gpfl_mu;
    frozen[cond_row(m)] = true;
    s.opt.frozen = frozen, s.opt.row_decay = decay;
    pfl_step_run(fl, client, w, model, &s, stats);
    update_conditions(fl, client, model);
    free(mem);
}

/* The personalized model's output: its head on CoV(h, p_i). */
static int gpfl_personal_correct(const pfl_fl *fl, pfl_exec *x, const float *params) {
    const pfl_model *m = fl->model;
    const int D = feature_dim(m), C = m->classes, B = x->batch;
    float *mem = pfl_malloc(sizeof(float) * (VALVE_FLOATS(D) + 2 * (size_t)B * D + (size_t)C));
    if (!mem) return 0;
    float *fp = mem + VALVE_FLOATS(D), *h = fp + (size_t)B * D, *z = h + (size_t)B * D;
    const uint8_t *labels = pfl_exec_labels(x);
    const pfl_gpfl_view v = view_of(m, params);
    pfl_gpfl_valve(&v, v.cond_p, pfl_exec_features(x, head_row(m), h), B, fp, mem);
    int correct = 0;
    for (int n = 0; n < B; n++) {
        for (int c = 0; c < C; c++) {
            double acc = v.head_b[c];
            for (int d = 0; d < D; d++) acc += (double)v.head_w[(size_t)c * D + d] * fp[(size_t)n * D + d];
            z[c] = (float)acc;
        }
        correct += pfl_argmax(z, C) == labels[n];
    }
    free(mem);
    return correct;
}

/* The parameters GPFL adds: CoV and GCE (shared) and two conditions per client. */
static void gpfl_report(const pfl_fl *fl, FILE *f, int what) {
    const pfl_model *m = fl->model;
    if (what != PFL_REPORT_SUMMARY) return;
    size_t shared = 0;
    for (int l = gce_row(m); l < cond_row(m); l++) shared += m->layers[l].length;
    fprintf(f, ",\n  \"extra_params_shared\": %zu", shared);
    fprintf(f, ",\n  \"extra_params_per_client\": %zu", m->layers[cond_row(m)].length);
}

/* The authors' run_me.sh (TsingZ0/GPFL): "-lam 0.01 -mu 0.1 for 4-layer CNN
 * and 3-layer MLP"; its ResNet-18 and fastText runs pass "-lam 0.0001
 * -mu 0.0" (FLAYER's Table 5, the FLAYER table with GPFL, is ResNet-18). */
static const pfl_param gpfl_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "gpfl-lambda", gpfl_lambda), .def = 0.01, .max = 1e6, .metavar = "F",
     .help = "weight lambda of the magnitude-level guidance ||CoV(h, g) - e_y|| toward the received embeddings"},
    {PFL_ALGO_PARAM(FLOAT, "gpfl-mu", gpfl_mu), .def = 0.1, .max = 1e6, .metavar = "F",
     .help = "weight decay mu of the valve (CoV) and the category embeddings (GCE)"},
};

const pfl_algo pfl_algo_gpfl = {
    .name = "gpfl",
    .description = "GPFL: a conditional valve splits the features into a route to the personal head and one "
                   "guided by shared category embeddings",
    PFL_PARAMS(gpfl_params),
    /* the global model's head is never trained (heads are personal): no global accuracy, as PFLlib reports none */
    .has_global = false,
    .stateful = true,
    .personal = pfl_personal_unshared, /* the head and the conditions */
    .blocks = gpfl_blocks,
    .create = gpfl_create,
    .check = gpfl_check,
    .receive = gpfl_receive,
    .local_train = gpfl_train,
    .personal_correct = gpfl_personal_correct,
    .report = gpfl_report,
};
