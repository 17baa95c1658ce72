/* A client's local training, as a step made of named parts that a method
 * fills (docs/architecture.md, "The local step and the backend"):
 *
 *   batch -> forward -> loss terms -> backward -> gradient terms -> optimizer
 *                    \-> extra blocks
 *
 * pfl_step_default gives FedAvg's step: cross-entropy on the logits, SGD
 * with the run's rate, momentum and weight decay (FLAYER's per-layer rates
 * under --flayer-lr). A method changes what differs: the cross-entropy's
 * weight or its per-class offset, a loss term on the logits or on a layer's
 * features (FedPHP's MMD, FedCP's and GPFL's heads), a proximal gradient
 * term (FedProx, Ditto, FedAMP, pFedCFR) or one of its own, an extra block
 * stepped from the same forward (FedRoD's personal head), frozen rows and
 * per-row weight decay, which samples and how long. A method whose batches
 * are its own work (APPLE, PartialFed, APFL, pFedMe, Per-FedAvg) declares
 * it with `own` and gets each batch with the executor. Everything runs
 * through the worker's executor (src/backend), so a method never names a
 * backend; the parts a device backend cannot run (host callbacks: custom
 * terms, blocks, owned batches) are what pfl_step_host_part names, and a
 * device executor refuses such a step (pfl_exec_refuse): the round loop
 * then stops the run with one line.
 *
 * The fast paths are chosen from what is declared: the step fused into the
 * backward pass when the loss is the cross-entropy alone and the optimizer
 * plain SGD on every row; fastText's sparse embedding step when nothing but
 * the cross-entropy reads or changes a gradient and the optimizer has no
 * momentum or weight decay. */
#ifndef PFL_FL_STEP_H
#define PFL_FL_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "fl/state.h"
#include "nn/model.h"
#include "util/rng.h"

/* What local training did, summed over its batches. */
typedef struct {
    double loss_sum;      /* sum over batches of mean loss x batch size */
    long samples;         /* samples seen (counting epochs) */
    long last_epoch_correct, last_epoch_samples; /* training accuracy of the last epoch */
    long fused_batches;   /* batches stepped by the fused backward-and-SGD pass (the fast path: what a
                           * test asks to know the path taken, rather than guessing it from rounding) */
} pfl_train_stats;

#define PFL_AT_LOGITS (-1)  /* a term or block that reads the logits */
#define PFL_STEP_MAX_TERMS 4
#define PFL_STEP_MAX_REFS 2
#define PFL_STEP_MAX_PROX (PFL_MAX_LAYERS + 2)

/* What a loss term sees of one batch. */
typedef struct {
    const float *z;                          /* B x n: the logits or features of the model being trained */
    const float *refs[PFL_STEP_MAX_REFS];    /* the same of each reference model on the same batch */
    const uint8_t *labels;
    int B;
    long n;
    const float *params;                     /* the model being trained (host memory) */
    float *grads;                            /* its gradient (host memory): a term with parameters of its own
                                              * (an extra block of the model) adds theirs here */
} pfl_term_batch;

/* A term of the local loss: weight x value(z), z the logits (at =
 * PFL_AT_LOGITS) or the features entering layer `at`. */
typedef struct {
    const char *name;                        /* for messages: "fedphp's MMD" */
    int at;
    float weight;
    /* models (whole vectors) run on the batch before the trained one, whose
     * same logits or features the term compares with: in evaluation mode (a
     * fixed teacher), or with refs_train in training mode drawing dropout
     * from the step's stream first (FedCP's received extractor) */
    const float *refs[PFL_STEP_MAX_REFS];
    int num_refs;
    bool refs_train;
    /* its value on the batch, its gradient with respect to z into dz (B x n,
     * zeroed), and, when `predicts` (the term computes the network's output:
     * FedCP, GPFL), the samples it classifies correctly into *correct */
    double (*value)(void *ctx, const pfl_term_batch *b, float *dz, int *correct);
    void *ctx;
    bool predicts;
} pfl_loss_term;

/* A gradient term added before the optimizer step: mu (params - anchor) on
 * the parameters [offset, offset + length), the gradient of the proximal
 * term mu/2 ||w - anchor||^2 there (anchor a whole vector, indexed alike). */
typedef struct {
    float mu;
    const float *anchor;
    size_t offset, length;
} pfl_prox_term;

/* A gradient term of the method's own, on host memory. */
typedef struct {
    void (*add)(void *ctx, const pfl_model *m, const float *params, float *grads);
    void *ctx;
} pfl_grad_term;

/* A block trained beside the model from the same forward (FedRoD's
 * personal head): after each batch's forward, before the model's backward,
 * with the features entering layer `at` (or the logits) and the logits. */
typedef struct {
    const float *features, *logits;
    const uint8_t *labels;
    int B;
} pfl_block_batch;

typedef struct {
    int at;
    void (*step)(void *ctx, const pfl_block_batch *b);
    void *ctx;
} pfl_block_term;

/* One batch of a step whose batches are the method's (pfl_step.own): its
 * samples, which the method gathers into the executor as it needs them
 * (pfl_exec_gather: all at once, or in parts of at most the executor's
 * max_batch when the step's batch is larger); `model` is the vector being
 * trained. The method counts what it trained with pfl_step_count. */
typedef struct {
    pfl_fl *fl;
    int client;
    pfl_worker *w;
    pfl_exec *x;
    pfl_xbuf *model;
    const int *idx;         /* the batch's sample indices (B of them) */
    int B;
    long index;             /* batches of this step before this one */
    bool last_epoch;
    pfl_rng *dropout;       /* the step's dropout stream */
    pfl_train_stats *stats;
} pfl_owned_batch;

/* true: the method did the batch; false: the step's own SGD does it. */
typedef bool (*pfl_batch_owner)(void *ctx, pfl_owned_batch *b);

/* The optimizer: SGD as torch.optim.SGD on every row of the layer table
 * (the backbone's layers and any extra blocks). */
typedef struct {
    float lr, momentum, weight_decay;
    bool layer_lr;            /* FLAYER's per-layer rates (Eq. 4) on the backbone's layers */
    const bool *frozen;       /* per row: not updated; NULL: every row learns */
    const float *row_decay;   /* per row: its weight decay; NULL: weight_decay on every row */
} pfl_step_optimizer;

typedef struct {
    /* how long: `epochs` passes, or `steps` > 0 batches (passes repeating
     * as needed; with --local-steps K an epoch is K batches) */
    int epochs, steps;
    /* on what: the client's training split, or these samples */
    const int *samples;
    int n_samples;
    int batch;                /* 0: --batch */
    int min_batch;            /* a pass's last batch smaller than this is left out (0, 1: none) */
    /* the streams: the round keying batch order and dropout (0: the current
     * round) and the batch order's purpose */
    int round;
    pfl_rng_purpose shuffle;
    /* the loss */
    double ce_weight;         /* of the cross-entropy on the logits (0: none) */
    const float *ce_offset;   /* per class, added to the logits in it (FedRoD's balanced softmax); NULL: none */
    pfl_loss_term terms[PFL_STEP_MAX_TERMS];
    int num_terms;
    /* the gradient */
    pfl_prox_term prox[PFL_STEP_MAX_PROX];
    int num_prox;
    pfl_grad_term grads[PFL_STEP_MAX_TERMS];
    int num_grads;
    pfl_block_term blocks[PFL_STEP_MAX_TERMS];
    int num_blocks;
    pfl_step_optimizer opt;
    /* batches that are the method's work */
    pfl_batch_owner own;
    void *own_ctx;
} pfl_step;

/* FedAvg's step for the current round: --epochs, --lr (decayed by
 * --lr-decay), cross-entropy, --momentum, --weight-decay, FLAYER's rates
 * under --flayer-lr. */
pfl_step pfl_step_default(const pfl_fl *fl);

/* Appending parts; each returns 0, or -1 with a message when the list is full. */
int pfl_step_add_term(pfl_step *s, const pfl_loss_term *t);
int pfl_step_add_prox(pfl_step *s, float mu, const float *anchor, size_t offset, size_t length);
int pfl_step_add_grad(pfl_step *s, void (*add)(void *ctx, const pfl_model *m, const float *params, float *grads),
                      void *ctx);
int pfl_step_add_block(pfl_step *s, int at, void (*step)(void *ctx, const pfl_block_batch *b), void *ctx);

/* Runs the step on client `client`'s data, training `model` (a whole model
 * vector) in place with worker w's executor; adds to stats. */
void pfl_step_run(pfl_fl *fl, int client, pfl_worker *w, float *model, const pfl_step *s, pfl_train_stats *stats);

/* The batches pfl_step_run trains client `client` on with step `s` (its
 * epochs or batch budget over its samples; 0 for a client without any): a
 * server that must know a client's number of local steps (SCAFFOLD's K)
 * computes it from the partition, as the client's step does. */
long pfl_step_batches(const pfl_fl *fl, const pfl_step *s, int client);

/* Counts an owned batch's work into the step's statistics: its mean loss
 * over n samples and, in the last epoch, how many it classified correctly. */
void pfl_step_count(pfl_owned_batch *b, float loss, int correct, int n);

/* The part of a step that only runs on host memory (a custom term, block,
 * gradient term or owned batches), or NULL when a device backend can run all
 * of it. */
const char *pfl_step_host_part(const pfl_step *s);

/* Batches `epochs` local epochs make under --local-steps K: epochs * K;
 * 0 when K is 0 (an epoch is then one pass over the client's data). */
long pfl_epoch_steps(const pfl_fl *fl, int epochs);

/* FedTSDP: the learning rate of the current round, cfg.lr * cfg.lr_decay^(round - 1)
 * (cfg.lr when lr_decay is 0 or 1, and at round 0). pfl_step_default
 * uses it, so every algorithm's local training decays the same way. */
float pfl_round_lr(const pfl_fl *fl);
/* The same for round `round` (FedAvg-C fine-tunes at an evaluation for the next round). */
float pfl_lr_of_round(const pfl_fl *fl, int round);

/* A method that trains two things in a round, one after the other (Ditto:
 * the personal model, then its copy of the global one; FedRep: the head,
 * then the base), sets the length of each phase here. Without --local-steps
 * each phase runs its own epochs (first_epochs, then cfg.epochs). With
 * --local-steps K and --step-budget total (pfl's rule), the round's
 * cfg.epochs x K batches are divided between the phases in the ratio
 * first_epochs : cfg.epochs, rounded, each phase with epochs getting at
 * least one batch when there are two; with --step-budget each, every epoch
 * of either phase is K batches. A phase left with no batch gets epochs =
 * steps = 0, which trains nothing. Writes epochs and steps of both. */
void pfl_split_round_steps(const pfl_fl *fl, int first_epochs, pfl_step *first, pfl_step *second);

#endif
