/* FedBABU (Oh et al., ICLR 2022, "FedBABU: Toward Enhanced Representation for
 * Federated Image Classification"): during federated training the head (the
 * top --head-layers layers) keeps its random initialization, frozen on every
 * client, and only the body is trained and averaged. A client's
 * personalized model is the global model fine-tuned on its own training
 * split for --fine-tune-epochs epochs, every layer learning, as PFLlib's
 * clientbabu.fine_tune(['base', 'head']) does; pfl fine-tunes at every
 * evaluation (PFLlib only after the last round), from the client's stream
 * (seed, round, client, ALGO), so the digest after the last round re-derives
 * the same models. The global model is the body under the initial head. */
#include <omp.h>
#include <stdbool.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

/* The head is frozen on every client and every client starts from the same
 * initial head, so it is never averaged: marking it not shared keeps the
 * global head bitwise the initial one and leaves it out of the messages. */
static int fedbabu_create(pfl_fl *fl) {
    const int first_head = pfl_first_head_layer(fl->model, fl->cfg.algo.head_layers);
    if (first_head == 0)
        return pfl_err("--head-layers %d: the frozen head would be all %d layers of %s, leaving no body to train",
                       fl->cfg.algo.head_layers, fl->model->num_layers, fl->model->name);
    for (int l = first_head; l < fl->model->num_layers; l++) fl->shared[l] = false;
    return 0;
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

/* The personalized model: the global model fine-tuned, whole, on the
 * client's training split (evaluation runs on the worker of the calling
 * thread, whose buffers other than `scratch` are free then). */
static const float *fedbabu_personal_model(pfl_fl *fl, int client, float *scratch) {
    const int t = omp_get_thread_num();
    pfl_worker *w = &fl->workers[t < fl->num_workers ? t : 0];
    memcpy(scratch, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
    pfl_step s = pfl_step_default(fl);
    s.epochs = fl->cfg.algo.fine_tune_epochs;
    s.shuffle = PFL_RNG_ALGO;
    pfl_train_stats ignored = {0};
    pfl_step_run(fl, client, w, scratch, &s, &ignored);
    return scratch;
}

/* PFLlib: the head is `fc`, the output layer; fine_tuning_epochs 10. */
static const pfl_param fedbabu_params[] = {
    {PFL_ALGO_PARAM(INT, "head-layers", head_layers), .def = 1, .min = 1, .max = PFL_MAX_LAYERS, .metavar = "S",
     .help = "top layers frozen at their initialization during federated training"},
    {PFL_ALGO_PARAM(INT, "fine-tune-epochs", fine_tune_epochs), .def = 10, .max = 1e5, .metavar = "E",
     .help = "epochs of whole-model fine-tuning that make a client's personalized model"},
};

const pfl_algo pfl_algo_fedbabu = {
    .name = "fedbabu",
    .description = "FedBABU: frozen random head during training, body averaged; personalized = fine-tuned "
                   "(--fine-tune-epochs)",
    PFL_PARAMS(fedbabu_params),
    .has_global = true,
    .create = fedbabu_create,
    .receive = pfl_receive_base, /* under --bn local or a module: the head stays the client's (the initial one) */
    .local_train = fedbabu_train,
    .personal_model = fedbabu_personal_model,
};
