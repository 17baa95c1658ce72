/* Class prototypes, the messages of the methods that exchange them instead
 * of (or beside) models: FedProto, FD, FedPCL, FedGH and FedPAC
 * (docs/algorithms.md, "Methods that exchange class prototypes").
 *
 * A prototype is the mean of a model's features (or logits, for FD) over a
 * client's samples of one class. A prototype set of C classes in D
 * dimensions is C x D floats, then C presence flags (1: the class has a
 * prototype, 0: it has none): C (D + 1) floats, written and read in a
 * method's message block, an extra block of the model vector (shared, so it
 * travels as a shared layer does under MPI, and frozen in training) that
 * the backbone never reads: the client writes its set there in its upload,
 * the server its aggregate in the global model, which sends it. */
#ifndef PFL_ALGOS_PROTOS_H
#define PFL_ALGOS_PROTOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fl/method.h"

/* Floats of a set: C (D + 1). */
static inline size_t pfl_protos_len(int C, int D) { return (size_t)C * ((size_t)D + 1); }
static inline const float *pfl_protos_present(const float *set, int C, int D) { return set + (size_t)C * D; }
static inline bool pfl_protos_has(const float *set, int C, int D, int c) {
    return pfl_protos_present(set, C, D)[c] != 0.0f;
}

/* D of the feature prototypes: the width of the features entering the
 * model's last layer (PFLlib's model.base(x) under a one-layer head). */
int pfl_protos_feature_dim(const pfl_model *m);

/* Appends the shared block `name`: a prototype set of C classes in D
 * dimensions ("protos", C x D, and "present", C), zeros (no prototype),
 * then the `n_extra` tensors `extra` (FedPAC's statistics). */
int pfl_protos_add_block(pfl_model *m, const char *name, int D, int n_extra, const pfl_block_tensor *extra);

/* The block `name` of prototypes of the features entering the last layer,
 * for `method`; a one-layer model, which has no such features, refused. */
int pfl_protos_add_feature_block(pfl_model *m, const char *method, const char *name);

/* The message block (the first extra block) of a model vector. */
float *pfl_protos_block(const pfl_model *m, float *vector);
const float *pfl_protos_block_const(const pfl_model *m, const float *vector);

/* Running per-class sums of rows, in double, in the order they come. */
typedef struct {
    double *sum;  /* C x D */
    long *count;  /* C */
    int C, D;
} pfl_proto_sums;

int pfl_proto_sums_init(pfl_proto_sums *s, int C, int D);
void pfl_proto_sums_free(pfl_proto_sums *s);
/* Adds B rows of z (B x D) to their labels' sums; `normalize`: each row
 * divided by max(||row||, 1e-12) first (F.normalize). */
void pfl_proto_sums_add(pfl_proto_sums *s, const float *z, const uint8_t *labels, int B, bool normalize);
/* The set: each class's mean, present where it had a row. */
void pfl_proto_sums_mean(const pfl_proto_sums *s, float *set);
/* A block of the local step (pfl_step_add_block, ctx a pfl_proto_sums)
 * that adds each training batch's rows: prototypes collected during
 * training, from the forward each batch trains with (FedProto, FD). */
void pfl_proto_sums_step(void *ctx, const pfl_block_batch *b);

/* The client's training split under `model`, in evaluation mode and
 * batches of --eval-batch, in order: each batch's rows at `at` (features
 * entering that layer, or the logits, PFL_AT_LOGITS) handed to add(ctx, z,
 * labels, B). */
void pfl_protos_each_batch(pfl_fl *fl, pfl_worker *w, int client, const float *model, int at,
                           void (*add)(void *ctx, const float *z, const uint8_t *labels, int B), void *ctx);

/* The set of the client's training split under `model`, in evaluation mode
 * and batches of --eval-batch: the features entering layer `at` (or the
 * logits, PFL_AT_LOGITS), normalized first when `normalize` (PFLlib's
 * collect_protos, after training). 0, or -1 when out of memory. */
int pfl_protos_of_split(pfl_fl *fl, pfl_worker *w, int client, const float *model, int at, bool normalize,
                        float *set);

/* The plain mean over the uploads' message blocks of each class's
 * prototype, over the uploads that have it (PFLlib's proto_aggregation:
 * every client counts once, whatever its samples); a class none has stays
 * absent. D: the prototypes' dimension. */
void pfl_protos_mean(const pfl_model *m, float *const *uploads, int n, int D, float *out);

/* lambda MSE toward the prototypes (FedProto, FedPAC): the mean over the
 * B x D entries of (z - p_y)^2, p_y the set's prototype of the sample's
 * class, or z itself (a zero) where the set has none (PFLlib's proto_new,
 * a copy of rep with the global prototypes written in); its gradient into
 * dz (B x D, added). */
double pfl_protos_mse(const float *set, int C, int D, const float *z, const uint8_t *labels, int B, float *dz);

/* pfl_protos_mse as a loss term's value (pfl_loss_term.value), ctx a
 * pfl_protos_target: the set toward which, its classes and dimension. */
typedef struct {
    const float *set;
    int C, D;
} pfl_protos_target;
double pfl_protos_mse_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct);

/* A personalized evaluation (pfl_algo.personal_correct) by prototypes:
 * the samples of the batch whose predict(set, C, D, features) is their
 * label, the set the model's message block and the features those entering
 * its last layer. */
int pfl_protos_count_correct(const pfl_fl *fl, pfl_exec *x, const float *params,
                             int (*predict)(const float *set, int C, int D, const float *z));

/* Classes present in a set. */
int pfl_protos_count(const float *set, int C, int D);
/* Bytes of a set's prototypes as a message: per class present, its D
 * floats and the class as a 32-bit integer. */
uint64_t pfl_protos_bytes(const float *set, int C, int D);
/* Bytes of the set a client uploads: one prototype per class of its
 * training split. */
uint64_t pfl_protos_client_bytes(const pfl_fl *fl, int client, int D);

/* D of the prototypes in the model's message block. */
int pfl_protos_dim(const pfl_model *m);

/* A per-worker buffer of one set: the set a client computed in local_train,
 * which its upload writes into the message block (the trained model's own
 * block keeps what the client received). */
typedef struct {
    float *sets;
    size_t len;
} pfl_protos_stash;

int pfl_protos_stash_init(pfl_protos_stash *s, const pfl_fl *fl, size_t len);
void pfl_protos_stash_free(pfl_protos_stash *s);
float *pfl_protos_stash_here(const pfl_protos_stash *s, pfl_fl *fl);

/* ---- hooks of the methods whose server sees prototypes only (FedProto,
 * FD, FedPCL), whose algo_state begins with a pfl_protos_stash ---- */

/* Every backbone layer not shared (only the message block travels) and the
 * stash, of one set, made. */
int pfl_protos_exchange_setup(pfl_fl *fl, pfl_protos_stash *stash);
/* create and destroy of a method whose whole state is the stash. */
int pfl_protos_exchange_create(pfl_fl *fl);
void pfl_protos_exchange_destroy(pfl_fl *fl);
/* FedAvg's step with the message block frozen and every batch's rows at
 * `at` (features, or PFL_AT_LOGITS) summed per class, their means the
 * stash's set; with `term` added when the set the client received (the
 * model's block) has a prototype (PFLlib adds none before the first). */
void pfl_protos_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats, int at,
                      const pfl_loss_term *term);
/* upload = model, its message block's first set the stash's. */
void pfl_protos_upload(pfl_fl *fl, int client, const float *model, float *upload);
/* The global model's message block: the plain mean of the uploads'. */
void pfl_protos_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads);
/* Down: the global set the client trained with (the global block before
 * this round's aggregation); up: one prototype per class it has. */
void pfl_protos_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                                uint64_t *up);

/* Refuses the modules that need a received model to mix (--ala,
 * --flayer-agg) or an uploaded one to mask (--flayer-mask): one line
 * naming the flag and `why` (what the method sends instead). */
int pfl_protos_refuse_modules(const pfl_config *cfg, const char *method, const char *why);

#endif
