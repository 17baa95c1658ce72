/* FedRep (Collins et al. 2021): like FedPer, the head stays on the client,
 * but local training is in two phases: --head-epochs epochs on the head with
 * the base frozen, then --epochs epochs on the base with the head frozen
 * (PFLlib's clientrep). Only the base is shared. Under --local-steps K the
 * two phases share the round's epochs x K batches (pfl_split_round_steps). */
#include <stdbool.h>

#include "algos/algos.h"

static void fedrep_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_model *m = fl->model;
    const int first_head = pfl_first_head_layer(m, fl->cfg.algo.head_layers);
    bool base_frozen[PFL_MAX_LAYERS] = {false}, head_frozen[PFL_MAX_LAYERS] = {false};
    for (int l = 0; l < m->num_layers; l++) base_frozen[l] = l < first_head, head_frozen[l] = l >= first_head;
    pfl_step head = pfl_step_default(fl), base = pfl_step_default(fl);
    /* --local-steps K: the round's batches are shared by the two phases
     * (--step-budget total), head-epochs : epochs */
    pfl_split_round_steps(fl, fl->cfg.algo.head_epochs, &head, &base);
    head.opt.frozen = base_frozen;
    pfl_step_run(fl, client, w, model, &head, stats);
    base.opt.frozen = head_frozen;
    base.shuffle = PFL_RNG_SHUFFLE_PERSONAL; /* a second pass over the data: its own batch order */
    pfl_step_run(fl, client, w, model, &base, stats);
}

/* FedALA's appendix: "For FedRep, we set the number of local updates tau = 5";
 * one head layer, the output layer. */
static const pfl_param fedrep_params[] = {
    {PFL_ALGO_PARAM(INT, "head-layers", head_layers), .def = 1, .min = 1, .max = PFL_MAX_LAYERS, .metavar = "S|NAMES",
     .help = "layers in the personal head (a count in --layer-unit, or names: fc, layer4.*)", .layers = PFL_LAYERS_TOP_ROWS},
    {PFL_ALGO_PARAM(INT, "head-epochs", head_epochs), .def = 5, .max = 1e5, .metavar = "E",
     .help = "epochs on the head (base frozen) before the base epochs"},
};

const pfl_algo pfl_algo_fedrep = {
    .name = "fedrep",
    .description = "FedRep: head trained first with the base frozen (--head-epochs), then the base; base shared",
    PFL_PARAMS(fedrep_params),
    .has_global = true,
    .stateful = true,
    .personal = pfl_personal_unshared, /* the head */
    .create = pfl_share_base_only,
    .receive = pfl_receive_base,
    .local_train = fedrep_train,
};
