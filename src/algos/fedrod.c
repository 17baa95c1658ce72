/* FedRoD (Chen & Chao, ICLR 2022, "On Bridging Generic and Personalized
 * Federated Learning for Image Classification"): the model (body + generic
 * head, the last Linear layer) is trained by every client with the balanced
 * softmax loss -- cross-entropy on the logits plus log n_c, n_c the client's
 * training samples of class c, the class-balanced risk of the paper's Eq. 5
 * -- and averaged as FedAvg does. Beside it each client keeps a personal head
 * p, a Linear on the same features, trained on the same batches with plain
 * cross-entropy on out_g + out_p, the generic logits held fixed and the
 * features not back-propagated into (PFLlib's clientrod: `out_g.detach() +
 * self.pred(rep.detach())`, one step of each per batch, both at --lr).
 *
 * The personal heads live in the method's per-client store ("fedrod-head",
 * starting as the initial generic head: PFLlib's deepcopy of the predictor),
 * checkpointed. The personalized model is the global model whose output
 * layer is the sum of the generic and the personal head: both are Linear
 * maps of the same features, so (W_g + W_p) h + (b_g + b_p) = out_g + out_p,
 * PFLlib's personalized output, up to float rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

typedef struct {
    pfl_store *head; /* per client its personal head: the output layer's weight then bias (rows by client) */
} fedrod_state;

static int fedrod_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    const int out = m->num_layers - 1;
    const pfl_op *last = &m->ops[m->num_ops - 1];
    if (last->kind != PFL_OP_LINEAR || last->layer != out || m->layers[out].num_tensors != 2 ||
        m->layers[out].state_length != 0)
        return pfl_err("fedrod: model %s: the personal head needs a network ending in a Linear layer with bias",
                       m->name);
    fedrod_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    s->head = pfl_fl_store(fl, "fedrod-head", fl->cfg.clients, m->layers[out].length, fl->global + m->layers[out].offset);
    return s->head ? 0 : -1;
}

static void fedrod_destroy(pfl_fl *fl) {
    free(fl->algo_state);
    fl->algo_state = NULL;
}

void pfl_fedrod_log_counts(const pfl_fl *fl, int client, float *offset) {
    const pfl_client_data *cd = &fl->part->clients[client];
    const int C = fl->model->classes;
    for (int c = 0; c < C; c++) offset[c] = 0.0f;
    for (int i = 0; i < cd->n_train; i++) offset[fl->data->labels[cd->train[i]]] += 1.0f;
    for (int c = 0; c < C; c++) offset[c] = offset[c] > 0.0f ? logf(offset[c]) : -INFINITY;
}

void pfl_fedrod_head_step(float *head, const float *features, const float *generic, const uint8_t *labels, int B,
                          int D, int C, float lr, float *grad) {
    float *dw = grad, *db = grad + (size_t)D * C, z[256];
    memset(grad, 0, sizeof(float) * (size_t)(D + 1) * C);
    const float *w = head, *b = head + (size_t)D * C;
    for (int n = 0; n < B; n++) {
        const float *h = features + (size_t)n * D;
        float zmax = -INFINITY;
        for (int c = 0; c < C; c++) {
            double acc = b[c];
            for (int d = 0; d < D; d++) acc += (double)w[(size_t)c * D + d] * h[d];
            z[c] = generic[(size_t)n * C + c] + (float)acc;
            zmax = z[c] > zmax ? z[c] : zmax;
        }
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += exp((double)(z[c] - zmax));
        for (int c = 0; c < C; c++) { /* d loss / d z_c of the batch mean */
            const float g = (float)((exp((double)(z[c] - zmax)) / sum - (c == labels[n])) / B);
            db[c] += g;
            for (int d = 0; d < D; d++) dw[(size_t)c * D + d] += g * h[d];
        }
    }
    for (size_t j = 0; j < (size_t)(D + 1) * C; j++) head[j] -= lr * grad[j];
}

typedef struct {
    float *head, *grad, lr;
    int D, C;
} fedrod_head;

/* A block of the step: after each batch's forward through the global model,
 * one step of the personal head on the features and generic logits that
 * forward left. */
static void fedrod_personal_step(void *ctx, const pfl_block_batch *b) {
    const fedrod_head *h = ctx;
    pfl_fedrod_head_step(h->head, b->features, b->logits, b->labels, b->B, h->D, h->C, h->lr, h->grad);
}

static void fedrod_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    fedrod_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const int out = m->num_layers - 1, C = m->classes;
    float offset[256];
    pfl_fedrod_log_counts(fl, client, offset);
    pfl_step step = pfl_step_default(fl);
    step.ce_offset = offset; /* the balanced softmax */
    fedrod_head h = {pfl_store_write(s->head, client), pfl_malloc(sizeof(float) * m->layers[out].length),
                     step.opt.lr, (int)(m->layers[out].length / (size_t)C) - 1, C};
    if (h.head && h.grad) { /* else no room: the store's error fails the round, or this client does not train */
        pfl_step_add_block(&step, out, fedrod_personal_step, &h);
        pfl_step_run(fl, client, w, model, &step, stats);
    }
    free(h.grad);
    if (h.head) pfl_store_release(s->head, client);
}

/* The global model as the client holds it (with what --bn keeps local, its own) with the output layer
 * W_g + W_p, b_g + b_p. */
static const float *fedrod_personal_model(pfl_fl *fl, int client, float *scratch) {
    const fedrod_state *s = fl->algo_state;
    const pfl_layer *out = &fl->model->layers[fl->model->num_layers - 1];
    const float *held = pfl_default_personal_model(fl, client, scratch);
    if (held != scratch) memcpy(scratch, held, pfl_model_vector_len(fl->model) * sizeof(float));
    const float *head = pfl_store_read(s->head, client);
    for (size_t j = 0; j < out->length; j++) scratch[out->offset + j] += head[j];
    pfl_store_release(s->head, client);
    return scratch;
}

static int fedrod_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fedrod_state *s = fl->algo_state;
    return pfl_store_save(s->head, w, "fedrod.head");
}

static int fedrod_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fedrod_state *s = fl->algo_state;
    return pfl_store_load(s->head, r, "fedrod.head");
}

/* The parameters FedRoD adds beside the backbone: a personal head per client. */
static void fedrod_report(const pfl_fl *fl, FILE *f, int what) {
    if (what == PFL_REPORT_SUMMARY)
        fprintf(f, ",\n  \"extra_params_per_client\": %zu", fl->model->layers[fl->model->num_layers - 1].length);
}

const pfl_algo pfl_algo_fedrod = {
    .name = "fedrod",
    .description = "FedRoD: generic model trained with balanced softmax and averaged, plus a personal head per "
                   "client",
    .has_global = true,
    .create = fedrod_create,
    .destroy = fedrod_destroy,
    .local_train = fedrod_train,
    .personal_model = fedrod_personal_model,
    .report = fedrod_report,
    .save = fedrod_save,
    .load = fedrod_load,
};
