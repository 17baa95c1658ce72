/* FedAvg's local training and the head/base split of the layer table (the
 * step itself is step.c). */

#include "fl/method.h"

int pfl_first_head_layer(const pfl_model *m, int head) {
    int first = m->num_layers - head;
    return first < 0 ? 0 : (first > m->num_layers ? m->num_layers : first);
}

void pfl_default_local_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_step s = pfl_step_default(fl);
    pfl_step_run(fl, client, w, model, &s, stats);
}

