/* FedBABU (Oh et al., ICLR 2022, "FedBABU: Toward Enhanced Representation for
 * Federated Image Classification"): during federated training the head (the
 * top --head-layers layers) keeps its random initialization, frozen on every
 * client, and only the body is trained and averaged. A client's
 * personalized model is the global model fine-tuned on its own training
 * split for --fine-tune-epochs epochs, every layer learning, as PFLlib's
 * clientbabu.fine_tune(['base', 'head']) does. When: after the last round
 * (--fine-tune-at last, the default: PFLlib's serverbabu.py and the authors'
 * code fine-tune once, at the end, and score the global model, the body
 * under the initial head, every round before), or at every evaluation
 * (--fine-tune-at every, a per-round curve of fine-tuned accuracy, at
 * --fine-tune-epochs epochs of every client per evaluation). Fine-tuning
 * draws from the client's stream (seed, round, client, ALGO), so the digest
 * after the last round re-derives the same models; the last round's are
 * kept (a store of whole models, "fedbabu-tuned") so the digest does not
 * fine-tune again. The global model is the body under the initial head. */
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

typedef struct {
    pfl_store *tuned; /* per client: its fine-tuned model of the last round, once built */
    bool *have;       /* per client: its row holds it */
} fedbabu_state;

static bool fine_tune_every(const pfl_config *cfg) {
    return cfg->algo.fine_tune_at && !strcmp(cfg->algo.fine_tune_at, "every");
}

static int fedbabu_check(const pfl_config *cfg) {
    const char *at = cfg->algo.fine_tune_at;
    if (at && strcmp(at, "last") && strcmp(at, "every"))
        return pfl_err("--fine-tune-at '%s': expected last (after the last round, as PFLlib) or every (at every "
                       "evaluation)",
                       at);
    return 0;
}

/* The head is frozen on every client and every client starts from the same
 * initial head, so it is never averaged: marking it not shared keeps the
 * global head bitwise the initial one and leaves it out of the messages. */
static int fedbabu_create(pfl_fl *fl) {
    const int first_head = pfl_first_head_layer(fl->model, fl->cfg.algo.head_layers);
    if (first_head == 0)
        return pfl_err("--head-layers %d: the frozen head would be all %d layers of %s, leaving no body to train",
                       fl->cfg.algo.head_layers, fl->model->num_layers, fl->model->name);
    for (int l = first_head; l < fl->model->num_layers; l++) fl->shared[l] = false;
    fedbabu_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    s->tuned = pfl_fl_store(fl, "fedbabu-tuned", fl->cfg.clients, pfl_model_vector_len(fl->model), fl->global);
    s->have = pfl_calloc((size_t)fl->cfg.clients, sizeof(bool));
    return s->tuned && s->have ? 0 : -1;
}

static void fedbabu_destroy(pfl_fl *fl) {
    fedbabu_state *s = fl->algo_state;
    if (s) free(s->have);
    free(s);
    fl->algo_state = NULL;
}

/* Local training updates the body alone. */
static void fedbabu_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const int first_head = pfl_first_head_layer(fl->model, fl->cfg.algo.head_layers);
    bool head_frozen[PFL_MAX_LAYERS] = {false};
    for (int l = 0; l < fl->model->num_layers; l++) head_frozen[l] = l >= first_head;
    pfl_step s = pfl_step_default(fl);
    s.opt.frozen = head_frozen;
    pfl_step_run(fl, client, w, model, &s, stats);
}

/* The personalized model: the global model as the client holds it (with
 * what --bn keeps local, its own), fine-tuned, whole, on the client's
 * training split after the last round (or at every evaluation with
 * --fine-tune-at every); before, the model it holds. Evaluation runs on the
 * worker of the calling thread, whose buffers other than `scratch` are free
 * then. */
static const float *fedbabu_personal_model(pfl_fl *fl, int client, float *scratch) {
    fedbabu_state *st = fl->algo_state;
    const bool last = fl->round == fl->cfg.rounds;
    const float *held = pfl_default_personal_model(fl, client, scratch);
    if (!last && !fine_tune_every(&fl->cfg)) return held;
    const size_t V = pfl_model_vector_len(fl->model);
    if (last && st->have[client]) {
        memcpy(scratch, pfl_store_read(st->tuned, client), V * sizeof(float));
        pfl_store_release(st->tuned, client);
        return scratch;
    }
    if (held != scratch) memcpy(scratch, held, V * sizeof(float));
    const int t = omp_get_thread_num();
    pfl_worker *w = &fl->workers[t < fl->num_workers ? t : 0];
    pfl_step s = pfl_step_default(fl);
    s.epochs = fl->cfg.algo.fine_tune_epochs;
    s.shuffle = PFL_RNG_ALGO;
    pfl_train_stats ignored = {0};
    pfl_step_run(fl, client, w, scratch, &s, &ignored);
    float *row = last ? pfl_store_write(st->tuned, client) : NULL;
    if (row) { /* no room: it is fine-tuned again when asked (the store's error fails no round here) */
        memcpy(row, scratch, V * sizeof(float));
        pfl_store_release(st->tuned, client);
        st->have[client] = true;
    }
    return scratch;
}

/* PFLlib: the head is `fc`, the output layer, fine-tuned after the last round. The fine-tuning epochs
 * follow the authors' defaults (ft_ep 5 = local_ep 5: one round's local training), at pfl's default
 * --epochs 1, not PFLlib's -fte 10 (10 rounds' worth: a short run would cost several times its training). */
static const pfl_param fedbabu_params[] = {
    {PFL_ALGO_PARAM(INT, "head-layers", head_layers), .def = 1, .min = 1, .max = PFL_MAX_LAYERS, .metavar = "S",
     .help = "top layers frozen at their initialization during federated training"},
    {PFL_ALGO_PARAM(INT, "fine-tune-epochs", fine_tune_epochs), .alias = "fte", .def = 1, .max = 1e5, .metavar = "E",
     .help = "epochs of whole-model fine-tuning that make a client's personalized model (PFLlib: 10)"},
    {PFL_ALGO_PARAM(STRING, "fine-tune-at", fine_tune_at), .def_text = "last", .metavar = "last|every",
     .help = "when the personalized model is fine-tuned: last (after the last round; earlier evaluations score "
             "the model the client holds, as PFLlib and the authors' code) | every (at every evaluation)"},
};

const pfl_algo pfl_algo_fedbabu = {
    .name = "fedbabu",
    .description = "FedBABU: frozen random head during training, body averaged; personalized = fine-tuned "
                   "(--fine-tune-epochs, --fine-tune-at)",
    PFL_PARAMS(fedbabu_params),
    .has_global = true,
    .create = fedbabu_create,
    .check = fedbabu_check,
    .destroy = fedbabu_destroy,
    .receive = pfl_receive_base, /* under --bn local or a module: the head stays the client's (the initial one) */
    .local_train = fedbabu_train,
    .personal_model = fedbabu_personal_model,
};
