/* Ditto (Li et al. 2021): besides the FedAvg global model, each client keeps
 * a personal model v trained for --personal-epochs epochs with the proximal
 * term lambda/2 ||v - w_global||^2 toward the global model it received
 * (PFLlib's ptrain, run before the global-model training). The personalized
 * model evaluated is v; the upload is the client's copy of the global model
 * after --epochs of plain SGD. Under --local-steps K the two share the
 * round's epochs x K batches (pfl_split_round_steps). */
#include <string.h>

#include "algos/algos.h"

static void ditto_init(pfl_fl *fl, int client, float *model) {
    (void)client;
    memcpy(model, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
}

static void ditto_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    pfl_step personal = pfl_step_default(fl), global = pfl_step_default(fl);
    /* --local-steps K: the round's batches are shared by the two models
     * (--step-budget total), personal-epochs : epochs */
    pfl_split_round_steps(fl, fl->cfg.algo.personal_epochs, &personal, &global);
    pfl_step_add_prox(&personal, fl->cfg.algo.lambda, fl->global, 0, fl->model->num_params);
    personal.shuffle = PFL_RNG_SHUFFLE_PERSONAL;
    pfl_train_stats personal_stats = {0};
    float *v = pfl_client_model(fl, client); /* trained in place; NULL: no room (the round fails) */
    if (!v) return;
    pfl_step_run(fl, client, w, v, &personal, &personal_stats);
    pfl_step_run(fl, client, w, model, &global, stats);
    /* FLAYER's head mix weighs the personal model by its own accuracy */
    stats->last_epoch_correct = personal_stats.last_epoch_correct;
    stats->last_epoch_samples = personal_stats.last_epoch_samples;
}

/* The personal model was trained in place; the global copy is not kept. */
static void ditto_finish(pfl_fl *fl, int client, const float *model, float *state) {
    (void)fl, (void)client, (void)model, (void)state;
}

/* FedALA's appendix: "For Ditto, we set the number of local epochs for
 * personalized model s=2 ... and the coefficient of proximal term lambda=0.1". */
static const pfl_param ditto_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "lambda", lambda), .def = 0.1, .max = 1e6, .metavar = "F",
     .help = "proximal coefficient of the personal model toward the global one"},
    {PFL_ALGO_PARAM(INT, "personal-epochs", personal_epochs), .def = 2, .min = 1, .max = 1e5, .metavar = "E",
     .help = "local epochs of the personal model"},
};

const pfl_algo pfl_algo_ditto = {
    .name = "ditto",
    .description = "Ditto: FedAvg global model plus a personal model with a proximal term (--lambda)",
    PFL_PARAMS(ditto_params),
    .has_global = true,
    .stateful = true,
    .keeps_state = true,
    .local_init = ditto_init,
    .local_train = ditto_train,
    .finish = ditto_finish,
};
