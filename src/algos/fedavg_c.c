/* FedAvg-C and FedProx-C (FedALA, Sec. "Experiments": "FedAvg-C and
 * FedProx-C, which locally fine-tune the global model for local
 * initialization at each iteration"): FedAvg and FedProx whose clients
 * fine-tune the model they receive on their own training data before
 * anything else, so that the fine-tuned model is their local model.
 *
 *  - local initialization: --ft-epochs (1) epochs of FedAvg's local SGD
 *    (cross-entropy only: "fine-tuning only focuses on the local data") on
 *    the model the client holds after the broadcast (the global model; with
 *    --ala or --flayer-agg the module's mix);
 *  - local training: from the fine-tuned model, FedAvg's SGD (FedAvg-C) or
 *    FedProx's with its term --mu toward the global model (FedProx-C); the
 *    upload and the aggregation are FedAvg's;
 *  - personalized model: the fine-tuned model, the one training starts from
 *    (docs/evaluation.md's rule). It is a function of the model held, the
 *    client's data and the stream (seed, round, client, FINETUNE) of the
 *    round it prepares, so no client keeps it: an evaluation after round r
 *    fine-tunes with round r + 1's stream, which round r + 1's training
 *    draws again to start from bit for bit the model that was scored.
 *
 * The fine-tuning is local initialization, as ALA's weight learning is: it
 * does not count in train_loss or train_samples, and under --local-steps K
 * each of its epochs is K batches on top of the round's. */
#include <string.h>

#include "algos/algos.h"
#include "algos/prox.h"

/* The fine-tuning that prepares round `round` (its streams and its learning rate). */
static void fine_tune(pfl_fl *fl, int client, pfl_worker *w, float *model, int round) {
    pfl_step s = pfl_step_default(fl);
    s.epochs = fl->cfg.algo.ft_epochs;
    s.opt.lr = pfl_lr_of_round(fl, round);
    s.shuffle = PFL_RNG_FINETUNE;
    s.round = round;
    pfl_train_stats not_counted = {0};
    pfl_step_run(fl, client, w, model, &s, &not_counted);
}

static void fedavg_c_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    fine_tune(fl, client, w, model, fl->round);
    pfl_default_local_train(fl, client, w, model, stats);
}

static void fedprox_c_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    fine_tune(fl, client, w, model, fl->round);
    pfl_fedprox_local_train(fl, client, w, model, stats);
}

/* The model the client holds now, fine-tuned as the next round will. */
static const float *fine_tuned_model(pfl_fl *fl, int client, float *scratch) {
    const float *held = pfl_default_personal_model(fl, client, scratch);
    if (held != scratch) memcpy(scratch, held, pfl_model_vector_len(fl->model) * sizeof(float));
    fine_tune(fl, client, pfl_fl_worker_here(fl), scratch, fl->round + 1);
    return scratch;
}

/* FedALA is silent on the length of the fine-tuning. One epoch, as long as
 * the local training of FedALA's setting ("the number of local model
 * training epochs to 1, following FedAvg"): the smallest whole amount of the
 * "additional local training steps" FedALA compares ALA with.
 * docs/algorithms.md has the reasoning. */
#define FT_EPOCHS_PARAM                                                                                            \
    {PFL_ALGO_PARAM(INT, "ft-epochs", ft_epochs), .def = 1, .max = 1e5, .metavar = "E",                            \
     .help = "epochs of fine-tuning of the received model (the local initialization); 0: none"}

static const pfl_param fedavg_c_params[] = {FT_EPOCHS_PARAM};

/* FedProx's own --mu, as fedprox.c: FedALA's appendix, "For FedProx, we set
 * the parameter for proximal term mu to 0.001". */
static const pfl_param fedprox_c_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "mu", mu), .def = 0.001, .max = 1e6, .metavar = "F",
     .help = "proximal coefficient mu toward the global model"},
    FT_EPOCHS_PARAM,
};

const pfl_algo pfl_algo_fedavg_c = {
    .name = "fedavg-c",
    .description = "FedAvg-C: FedAvg whose clients fine-tune the received model (--ft-epochs) before training",
    PFL_PARAMS(fedavg_c_params),
    .has_global = true,
    .local_train = fedavg_c_train,
    .personal_model = fine_tuned_model,
};

const pfl_algo pfl_algo_fedprox_c = {
    .name = "fedprox-c",
    .description = "FedProx-C: FedProx whose clients fine-tune the received model (--ft-epochs) before training",
    PFL_PARAMS(fedprox_c_params),
    .has_global = true,
    .local_train = fedprox_c_train,
    .personal_model = fine_tuned_model,
};
