/* The algorithms pfl knows, by name. Each lives in its own file and fills a
 * pfl_algo with only the stages that differ from FedAvg's. */
#ifndef PFL_ALGOS_ALGOS_H
#define PFL_ALGOS_ALGOS_H

#include "fl/method.h"

extern const pfl_algo pfl_algo_fedavg;
extern const pfl_algo pfl_algo_local;
extern const pfl_algo pfl_algo_fedprox;
extern const pfl_algo pfl_algo_fedper;
extern const pfl_algo pfl_algo_fedrep;
extern const pfl_algo pfl_algo_ditto;
extern const pfl_algo pfl_algo_fedala;
extern const pfl_algo pfl_algo_flayer;
/* fedamp, pfedcfr: attentive message passing (src/algos/amp.h) */
extern const pfl_algo pfl_algo_fedamp;
extern const pfl_algo pfl_algo_pfedcfr;
/* FedALP (src/algos/fedalp.h) */
extern const pfl_algo pfl_algo_fedalp;
/* pFedMe (src/algos/pfedme.c), CFL (src/algos/cfl.h) */
extern const pfl_algo pfl_algo_pfedme;
extern const pfl_algo pfl_algo_cfl;
/* FedTSDP (src/algos/fedtsdp.h) */
extern const pfl_algo pfl_algo_fedtsdp;
/* Methods that change the model: LG-FedAvg, FedBABU, APFL, FedRoD */
extern const pfl_algo pfl_algo_lgfedavg;
extern const pfl_algo pfl_algo_fedbabu;
extern const pfl_algo pfl_algo_apfl;
extern const pfl_algo pfl_algo_fedrod;
/* ... and the ones with extra parameter blocks: FedCP, GPFL */
extern const pfl_algo pfl_algo_fedcp;
extern const pfl_algo pfl_algo_gpfl;

/* APFL's pieces (apfl.c), for its tests: out = alpha v + (1 - alpha) w over
 * n floats; the alpha step alpha - lr <v - w, grad_mix> clipped to [0, 1]. */
void pfl_apfl_mix(float *out, const float *v, const float *w, float alpha, size_t n);
float pfl_apfl_alpha_step(float alpha, const float *v, const float *w, const float *grad_mix, size_t n, float lr);
/* --reading pfllib's alpha step (PFLlib, from FedTorch): alpha - lr (<v - w,
 * alpha grad_v + (1 - alpha) grad_w> + 0.02 alpha), clipped to [0, 1]. */
float pfl_apfl_alpha_step_pfllib(float alpha, const float *v, const float *w, const float *grad_v,
                                 const float *grad_w, size_t n, float lr);
/* A client's alpha as it stands. */
float pfl_apfl_alpha(const pfl_fl *fl, int client);
/* FedRoD's pieces (fedrod.c): the balanced softmax offsets of a client, log
 * of its training samples per class (-INFINITY for a class it lacks); one
 * SGD step of a personal head (C x D weight, then C biases, in `head`) on the
 * cross-entropy of generic + head(features), grad scratch (D + 1) x C. */
void pfl_fedrod_log_counts(const pfl_fl *fl, int client, float *offset);
void pfl_fedrod_head_step(float *head, const float *features, const float *generic, const uint8_t *labels, int B,
                          int D, int C, float lr, float *grad);

/* FedCP's pieces (fedcp.c), for its tests. A view of the parts of a model
 * vector FedCP reads: the global head (the backbone's output layer, C x D
 * weight and C biases), the personal head block, the policy's Linear
 * (2D x D, 2D) and LayerNorm (2D, 2D); the same shape over gradients. */
typedef struct {
    int D, C;
    const float *wg, *bg, *wp, *bp, *fw, *fb, *lw, *lb;
} pfl_fedcp_view;
typedef struct {
    float *wp, *bp, *fw, *fb, *lw, *lb;
} pfl_fedcp_grads;
/* The context: the L2-normalized column sums of the personal head's weight (D floats). */
void pfl_fedcp_context(const float *wp, int C, int D, float *ctx);
/* One sample with features h: the policy's share pm (D) of each feature for
 * the personal head (1 - pm for the global one; `gumbel` 2D noise or NULL),
 * the output (C) and the cross-entropy against `label`; with g non-NULL,
 * adds scale x its gradients to g and to dh (D). scratch: 12 D floats. */
float pfl_fedcp_sample(const pfl_fedcp_view *v, const float *ctx, const float *h, const float *gumbel, int label,
                       float scale, float *out, float *pm, float *scratch, const pfl_fedcp_grads *g, float *dh);
/* weight x PFLlib's MMD (rbf, bandwidths 10, 15, 20, 50) of the B x D
 * features x against y; with dx non-NULL adds its gradient wrt x. */
float pfl_fedcp_mmd(const float *x, const float *y, int B, int D, float weight, float *dx);

/* GPFL's pieces (gpfl.c), for its tests. A conditional net of the valve
 * (CoV): nn.Sequential(Linear(D, D), ReLU, LayerNorm(D)), its D x D weight,
 * D biases, D LayerNorm weights and D LayerNorm biases. */
typedef struct {
    const float *w, *b, *ln_w, *ln_b;
} pfl_gpfl_net;
typedef struct {
    float *w, *b, *ln_w, *ln_b;
} pfl_gpfl_net_grads;
/* The parts of a model vector GPFL reads: the head (the backbone's output
 * layer, C x D weight and C biases), the category embeddings (C x D), the
 * valve's two nets, and the client's generic and personalized conditions
 * (D each); the same shape over gradients (no conditions: they are no
 * parameters of the loss). */
typedef struct {
    int D, C;
    const float *head_w, *head_b, *emb;
    pfl_gpfl_net gamma, beta;
    const float *cond_g, *cond_p;
} pfl_gpfl_view;
typedef struct {
    float *head_w, *head_b, *emb;
    pfl_gpfl_net_grads gamma, beta;
} pfl_gpfl_grads;
/* cond = sum_c weight[c] emb[c] (D): the generic condition with weights
 * 1/C, the personalized one with the client's share of each class. */
void pfl_gpfl_condition(const float *emb, const float *weight, int C, int D, float *cond);
/* The valve: out = ReLU(h * (1 + gamma(cond)) + beta(cond)) for B rows of
 * D features, gamma and beta the two nets on cond. scratch: 6 D + 2 floats. */
void pfl_gpfl_valve(const pfl_gpfl_view *v, const float *cond, const float *h, int B, float *out, float *scratch);
/* The angle-level guidance: the mean over B rows of x of the cross-entropy
 * of the softmax over cos(x, emb_c) (F.normalize on both); with dx / demb
 * non-NULL adds its gradients there. scratch: pfl_gpfl_angle_scratch. */
size_t pfl_gpfl_angle_scratch(int C, int D);
float pfl_gpfl_angle_loss(const float *x, const float *emb, const uint8_t *y, int B, int C, int D, float *dx,
                          float *demb, float *scratch);
/* The magnitude-level guidance: lambda ||x - emb[y]|| over the whole B x D
 * batch (torch.norm, not squared, not averaged); dx as above. */
float pfl_gpfl_magnitude_loss(const float *x, const float *emb, const uint8_t *y, int B, int D, float lambda,
                              float *dx);
/* GPFL's loss of B samples with features h: cross-entropy of the head on
 * CoV(h, cond_p) (its logits, B x C, into `logits`) + the angle-level
 * guidance of CoV(h, cond_g) toward v->emb + the magnitude-level one toward
 * emb_frozen (the embeddings as received). With g non-NULL adds the
 * gradients into g and dh (B x D). scratch: pfl_gpfl_scratch(B, C, D). */
size_t pfl_gpfl_scratch(int B, int C, int D);
float pfl_gpfl_loss(const pfl_gpfl_view *v, const float *emb_frozen, float lambda, const float *h, const uint8_t *y,
                    int B, float *logits, const pfl_gpfl_grads *g, float *dh, float *scratch);

/* FedALA's baselines: FedAvg-C, FedProx-C (src/algos/fedavg_c.c), Per-FedAvg, FedPHP */
extern const pfl_algo pfl_algo_fedavg_c;
extern const pfl_algo pfl_algo_fedprox_c;
extern const pfl_algo pfl_algo_perfedavg;
extern const pfl_algo pfl_algo_fedphp;
/* FedPHP's moving-average weight for a client that trained in `participations` rounds before this one
 * (--reading paper); the weight of a client's last trained model in what it holds for round `round`, mu
 * (round - 1) / rounds (--reading pfllib). */
float pfl_fedphp_mu(const pfl_fl *fl, int participations);
float pfl_fedphp_pfllib_mu(const pfl_fl *fl, int round);
/* Methods that download several models, FedFomo and APPLE, and PartialFed (src/algos/fedfomo.h, apple.h,
 * partialfed.h) */
extern const pfl_algo pfl_algo_fedfomo;
extern const pfl_algo pfl_algo_apple;
extern const pfl_algo pfl_algo_partialfed;
/* Traditional methods: SCAFFOLD, FedDyn, FedLC, FedNTD (their pieces, for their tests) */
extern const pfl_algo pfl_algo_scaffold;
extern const pfl_algo pfl_algo_feddyn;
extern const pfl_algo pfl_algo_fedlc;
extern const pfl_algo pfl_algo_fedntd;
/* Server optimizers on the round's mean update (src/algos/server_opt.c):
 * FedAvgM and FedOpt's FedAdam, FedYogi, FedAdagrad */
extern const pfl_algo pfl_algo_fedavgm;
extern const pfl_algo pfl_algo_fedadam;
extern const pfl_algo pfl_algo_fedyogi;
extern const pfl_algo pfl_algo_fedadagrad;
typedef enum { PFL_SERVER_MOMENTUM, PFL_SERVER_ADAM, PFL_SERVER_YOGI, PFL_SERVER_ADAGRAD } pfl_server_opt_kind;
/* Their hyper-parameters, from the run's flags. */
typedef struct {
    double eta, momentum, beta1, beta2, tau;
    bool nesterov;
} pfl_server_opt_hp;
pfl_server_opt_hp pfl_server_opt_hp_of(const pfl_config *cfg);
/* The server's step on [off, off + len): x the global model the clients
 * received, `global` the round's mean on entry and the new global model on
 * return; m (FedAvgM's velocity, FedOpt's first moment) and v (FedOpt's
 * second moment; NULL for FedAvgM) updated in place, all in double. */
void pfl_server_opt_step(pfl_server_opt_kind kind, const pfl_server_opt_hp *hp, const float *x, float *global,
                         double *m, double *v, size_t off, size_t len);
/* The server state as it stands (num_params doubles): m, or v with `second` (NULL for FedAvgM). */
const double *pfl_server_opt_state(const pfl_fl *fl, bool second);
/* FedADMM (src/algos/fedadmm.c): a client's dual variable alpha_i as it
 * stands (num_params floats); its update alpha += rho (w - theta) on
 * [off, off + len); the local epochs client `client` trains this round
 * (uniform in 1..--epochs from its PFL_RNG_ALGO stream, or --epochs); the
 * server's step size this round. */
extern const pfl_algo pfl_algo_fedadmm;
const float *pfl_fedadmm_dual(const pfl_fl *fl, int client);
void pfl_fedadmm_dual_update(float *alpha, const float *w, const float *theta, float rho, size_t off, size_t len);
int pfl_fedadmm_epochs(const pfl_fl *fl, int client);
double pfl_fedadmm_server_lr(const pfl_fl *fl);
/* SCAFFOLD, on the elements [off, off + len) of whole vectors: a client's
 * control after training, c_i <- c_i - c + (x - y) * inv, inv = 1 / (K lr);
 * the server's, c <- c + (1/N) sum_k ((x - y_k) * inv_k - c) over the n
 * uploads y_k (those with inv_k 0, which trained no batch, left out), as a
 * sum over the slots (control_sum adds upload y_k's term to acc, in slot
 * order: pfl_slot_sum) and its mean (control_mean: c += acc / N). */
/* SCAFFOLD's control variates as they stand (num_params floats): the
 * server's c for client -1, else client's c_i (valid until it trains). */
const float *pfl_scaffold_control(const pfl_fl *fl, int client);
void pfl_scaffold_control_update(float *ci, const float *c, const float *x, const float *y, size_t off, size_t len,
                                 float inv);
void pfl_scaffold_control_sum(float *acc, const float *c, const float *x, const float *y, float inv, size_t off,
                              size_t len);
void pfl_scaffold_control_mean(float *c, const float *acc, int N, size_t off, size_t len);
/* FedDyn, on [off, off + len): a client's linear-term vector after training,
 * grad <- grad - alpha (w - w_global); the server state, h <- h - alpha/N
 * sum_k (w_k - w_global), as a sum over the slots (state_sum adds w_k -
 * w_global to acc, in slot order: pfl_slot_sum) and its step (state_step:
 * h -= alpha (acc / N)); the gradient PFLlib's penalty alpha/2 ||w - w_global||
 * adds (zero where w = w_global). */
/* FedDyn's state (num_params floats): the server's h for client -1, else
 * client's linear-term vector grad_k (valid until it trains). */
const float *pfl_feddyn_state(const pfl_fl *fl, int client);
void pfl_feddyn_client_update(float *grad, const float *w, const float *global, size_t off, size_t len, float alpha);
void pfl_feddyn_state_sum(float *acc, const float *w, const float *global, size_t off, size_t len);
void pfl_feddyn_state_step(float *h, const float *acc, int N, float alpha, size_t off, size_t len);
/* FedLC's per-class offsets -tau n_y^(-1/4) (-INFINITY for a class without
 * samples) from the counts n_y of C classes. */
void pfl_fedlc_offsets(const double *counts, int C, float tau, float *offset);
/* FedNTD's loss on a batch of B x C logits z with the teacher's t: tau^2
 * KL(softmax(t_nt / tau) || softmax(z_nt / tau)), z_nt the logits without the
 * label's, the batch mean; its gradient with respect to z into dz (zero at
 * the labels). */
double pfl_fedntd_loss(const float *z, const float *t, const uint8_t *labels, int B, int C, float tau, float *dz);

/* Methods that exchange class prototypes (src/algos/protos.h): FedProto, FD, FedPCL, FedGH, FedPAC */
extern const pfl_algo pfl_algo_fedproto;
extern const pfl_algo pfl_algo_fd;
extern const pfl_algo pfl_algo_fedpcl;
extern const pfl_algo pfl_algo_fedgh;
extern const pfl_algo pfl_algo_fedpac;
/* FedProto's prediction: the class of the nearest prototype of `set` (C
 * classes in D dimensions) to the features z, by mean squared distance, the
 * first of equals; -1 when the set has none. */
int pfl_fedproto_nearest(const float *set, int C, int D, const float *z);
/* FD's distillation term on B rows of logits o (B x C): the mean over the
 * rows of -sum_c t_c log softmax(o)_c, t the global average logits of the
 * row's class in `global` (a set of C classes in C dimensions), or the row
 * itself where it has none (detached), taken as they are or, with
 * `softmax`, through a softmax; its gradient added into dz (B x C). */
double pfl_fd_soft_ce(const float *global, int C, const float *o, const uint8_t *labels, int B, bool softmax,
                      float *dz);
/* FedPCL's loss on B rows of features z (B x D): the mean over the rows of
 * L_g + L_p, L_g the cross-entropy of r . G^T / tau over the classes of the
 * global set, L_p the mean over the `clients` sets (packed one after the
 * other) of the same over each, r = z / max(||z||, 1e-12); a set without
 * the row's class adds nothing to it. Its gradient added into dz (B x D). */
double pfl_fedpcl_loss(const float *global, const float *sets, int clients, int C, int D, double tau, const float *z,
                       const uint8_t *labels, int B, float *dz);
/* FedPCL's gradient term: the gradient scaled to norm at most 10
 * (torch.nn.utils.clip_grad_norm_). */
void pfl_fedpcl_clip(void *ctx, const pfl_model *m, const float *params, float *grads);
/* FedPCL's prediction: argmax_c r . p_c over the set (0 for a class without
 * a prototype, the first of equals); -1 when the set has none. */
int pfl_fedpcl_predict(const float *set, int C, int D, const float *z);
/* The set the server holds for `client` (padded with the global prototypes). */
const float *pfl_fedpcl_set(const pfl_fl *fl, int client);
/* FedGH's server step: one pass of SGD at lr on the mean cross-entropy of
 * head(x) (head: C x D weight then C bias) over the n prototypes (n x D,
 * with their labels) taken in `order`, in batches of `batch`. */
void pfl_fedgh_train_header(float *head, const float *protos, const uint8_t *labels, const int *order, int n, int D,
                            int C, int batch, float lr);
/* FedPAC's statistics of n feature rows f (n x D) with their labels: h
 * (C x D) with h_k = p_k mu_k, and *v = (sum_k p_k mean_k ||f||^2 -
 * p_k^2 ||mu_k||^2) / n. 0, or -1 when out of memory. */
int pfl_fedpac_statistics(const float *f, const uint8_t *labels, int n, int C, int D, float *v, float *h);
/* FedPAC's quadratic program for client i of the n uploads: P = diag(v) +
 * D_i, D_i[a][b] = <h_i - h_a, h_i - h_b>, from gram[a][b] = <h_a, h_b>
 * (n x n, row-major, as P). */
void pfl_fedpac_qp_matrix(const double *gram, const float *v, int n, int i, double *P);
/* The minimizer x of x^T P x over the simplex (x >= 0, sum x = 1), P
 * symmetric positive semidefinite (n x n, row-major), by a primal
 * active-set method; 0, or -1 when a subproblem is singular or it does not
 * converge (x then undefined). */
int pfl_fedpac_simplex_qp(const double *P, int n, double *x);
/* out (len) = sum_j alpha_j x uploads[j][offset ..], a weight at most 1e-3
 * counted as 0 and the rest not renormalized (PFLlib's eps). */
void pfl_fedpac_combine(const double *alpha, int n, float *const *uploads, size_t offset, size_t len, float *out);
/* --reading (APPLE, APFL, FedPHP, Per-FedAvg): where a method's paper and
 * PFLlib's code, which FedALA's and FLAYER's tables ran, disagree, the run
 * follows PFLlib (the default) or the paper; docs/algorithms.md names each
 * difference. pfl_check_reading refuses another word (-1 with a message);
 * PFL_READING_PARAM is the flag's row in a method's table, with its help. */
bool pfl_reading_paper(const pfl_config *cfg);
int pfl_check_reading(const pfl_config *cfg);
#define PFL_READING_PARAM(HELP)                                                                                   \
    {PFL_ALGO_PARAM(STRING, "reading", reading), .def_text = "pfllib", .metavar = "pfllib|paper", .help = HELP}

/* PFLlib's personalized methods: FML, FedKD (their shared pieces: src/algos/mutual.h), FedDBE, FedMTL, FedBN */
extern const pfl_algo pfl_algo_fml;
extern const pfl_algo pfl_algo_fedkd;
extern const pfl_algo pfl_algo_feddbe;
extern const pfl_algo pfl_algo_fedmtl;
extern const pfl_algo pfl_algo_fedbn;
/* FedKD's pieces (fedkd.c), for its tests. The SVD of a tensor exchanged:
 * `slices` row-major rows x cols matrices one after the other in `a` (a
 * Linear's weight: 1 slice; a convolution's: out x in slices of kh x kw)
 * truncated in place to the first t singular values of each, t the rank
 * the energy rule gives over all slices' values (PFLlib's; with
 * paper_rank, the paper's); returns t, or -1 with a message. */
int pfl_fedkd_truncate(float *a, int slices, int rows, int cols, double energy, bool paper_rank);
/* The rank pfl_fedkd_truncate would keep of those slices (values only), or -1. */
int pfl_fedkd_rank(const float *a, int slices, int rows, int cols, double energy, bool paper_rank);
/* PFLlib's rule: the fewest of k singular values (squares, descending, in
 * sq2) whose energy exceeds energy x the total, among the first k - 1; 0
 * when none does (the tensor is then sent as zeros). paper_rank: the fewest
 * of all k reaching it. */
int pfl_fedkd_rank_rule(const double *sq2, int k, double energy, bool paper_rank);
/* The energy of round `round` (1..rounds): t_start + (round - 1) / rounds x (t_end - t_start). */
double pfl_fedkd_energy(const pfl_fl *fl, int round);
/* FedDBE's pieces (feddbe.c), for its tests: the head (C x D weight, C
 * biases) and the PRBM m (D) of a model vector, and the same of a gradient. */
typedef struct {
    int D, C;
    const float *head_w, *head_b, *prbm;
} pfl_feddbe_view;
typedef struct {
    float *head_w, *head_b, *prbm;
} pfl_feddbe_grads;
/* FedDBE's loss on B representations h (B x D) with labels y: the
 * cross-entropy of head(h + m) plus klw x mean_d 0.5 (r_d - g_d)^2, r the
 * running mean (D, updated here: r <- (1 - momentum) r + momentum mean_b h)
 * and g the global mean. With dh non-NULL adds the gradients to g and
 * writes d loss / dh there (B x D); counts head(h + m)'s correct answers.
 * scratch: D + 2 C floats. */
double pfl_feddbe_loss(const pfl_feddbe_view *v, const pfl_feddbe_grads *g, const float *h, const uint8_t *y, int B,
                       float *running, const float *global_mean, float momentum, float klw, float *dh, int *correct,
                       float *scratch);
/* The global mean g the initialization period computed. */
const float *pfl_feddbe_global_mean(const pfl_fl *fl);
/* FedMTL's pieces (fedmtl.c): 10^-f of a model (PFLlib's scale of the
 * regularizer), and its gradient as a proximal term mu (w - anchor) from the
 * sum `others` of the m - 1 other columns of W (n floats). */
double pfl_fedmtl_scale(const pfl_model *m);
void pfl_fedmtl_prox(double scale, int m, const float *others, size_t n, float *mu, float *anchor);
/* PFLlib's personalized methods: FedCAC, FedAS, PFL-DA, FedGC */
extern const pfl_algo pfl_algo_fedcac;
extern const pfl_algo pfl_algo_fedas;
extern const pfl_algo pfl_algo_pfl_da;
extern const pfl_algo pfl_algo_fedgc;
/* FedCAC's pieces (fedcac.c), for its tests. Masks are rows of 32-bit words,
 * a bit per parameter, held in float slots bit for bit. The critical
 * parameters of one tensor of n parameters, w trained from w0: bits
 * first..first+n-1 of mask set where |(w - w0) w| reaches the int(tau n)-th
 * largest (keys: n scratch words). */
void pfl_fedcac_select(const float *w, const float *w0, size_t n, double tau, uint32_t *keys, float *mask,
                       size_t first);
/* The client's model: its critical parameters (mask) from `customized`, over
 * `model`, on the layers the run shares. */
void pfl_fedcac_mix(const pfl_fl *fl, const float *mask, const float *customized, float *model);
/* The collaboration threshold of round r over the n x n overlaps (diagonal
 * unread): avg + r / beta (max - avg). */
double pfl_fedcac_threshold(const double *overlap, int n, int round, int beta);
/* FedAS's pieces (fedas.c): the alignment loss of B rows of features f (B x
 * D) toward the prototypes of their labels, sum over classes of the MSE of
 * the batch's in_batch[c] samples of c, its gradient into df; the Fisher
 * trace of a client's model. */
double pfl_fedas_align_loss(const float *f, const uint8_t *y, int B, int D, const float *proto, const int *in_batch,
                            float *df);
double pfl_fedas_fisher_trace(pfl_fl *fl, pfl_worker *w, int client, const float *model);
/* PFL-DA's pieces (pfl_da.c): the mean cross-entropy of the head (w: C x D,
 * b: C) on B rows of features h, adding its gradients into dw, db, dh
 * (B x D), the argmax hits into *correct; the gradient lambda (p - g) /
 * ||p - g|| of its head regularizer, added into grads. */
double pfl_da_head_xent(const float *w, const float *b, const float *h, const uint8_t *labels, int B, int D, int C,
                        float *dw, float *db, float *dh, int *correct);
void pfl_da_reg_grad(const float *personal, const float *global, size_t n, float lambda, float *grads);
/* FedGC's pieces (fedgc.c): the class predicted among the held ones (-1:
 * none); the server's correction step of every client's head. */
int pfl_fedgc_predict(const float *logits, const uint8_t *held, int C);
void pfl_fedgc_correct(pfl_fl *fl);
/* PFLlib's traditional methods: MOON, FedGen, FedCross */
extern const pfl_algo pfl_algo_moon;
/* MOON's model-contrastive loss (moon.c), for its tests: the batch mean of
 * -log(e^(cos(z, glob) / tau) / (e^(cos(z, glob) / tau) + e^(cos(z, prev) / tau)))
 * over B rows of n features; with dz non-NULL writes its gradient wrt z. */
double pfl_moon_contrastive(const float *z, const float *glob, const float *prev, int B, long n, float tau,
                            float *dz);
extern const pfl_algo pfl_algo_fedgen;
/* FedGen's pieces (fedgen.c), for its tests: the mean cross-entropy of a
 * linear head (C x D weight, then C biases) on B rows of features z against
 * labels y, adding its gradients into dhead and dz where they are not NULL;
 * the server's --fedgen-server-epochs Adam steps of the generator against
 * the global model's head. */
double pfl_fedgen_head_loss(const float *head, const float *z, const uint8_t *y, int B, int D, int C, float *dhead,
                            float *dz);
void pfl_fedgen_train_generator(pfl_fl *fl);
/* The generator's parameters (*length floats): fc1's hidden x (noise + C)
 * weight and hidden biases, its BatchNorm's hidden weights and biases, fc's
 * D x hidden weight and D biases. */
float *pfl_fedgen_generator(pfl_fl *fl, size_t *length);
/* One generated batch of --batch samples drawn from rng: the mean CE of
 * the global model's head on G's features against their labels, its
 * gradient wrt G's parameters added into grad (NULL: none). */
double pfl_fedgen_generator_loss(pfl_fl *fl, pfl_rng *rng, float *grad);
extern const pfl_algo pfl_algo_fedcross;
/* FedCross's pieces (fedcross.c), for its tests: which middleware model the
 * client trains in `round` (its place in the round's random order; -1 when
 * not selected); the similarity of two model vectors (the sum over layers of
 * the cosine of their parameters, the last layer twice); model j's
 * collaborator among K by the K x K similarities (strategy 0 in turn, 1 the
 * least similar, 2 the most similar); middleware model k. */
int pfl_fedcross_slot(const pfl_config *cfg, int round, int client);
double pfl_fedcross_similarity(const pfl_model *m, const float *a, const float *b);
int pfl_fedcross_collaborator(const double *sim, int K, int j, int strategy, int round);
const float *pfl_fedcross_middleware(const pfl_fl *fl, int k);

/* NULL-terminated list of every algorithm. */
extern const pfl_algo *const pfl_algos[];

/* The global model with the client's own rows (backbone layers and extra
 * blocks) where they are not shared: what a method sends whose server
 * never touches the unshared rows (the prototype methods' personal
 * backbones or bases). */
void pfl_receive_unshared_own(pfl_fl *fl, int client, const float *state, float *received);
/* FedPer's and FedRep's shared pieces: the client builds its model from the
 * global base and its own head; the server aggregates only the base. */
void pfl_receive_base(pfl_fl *fl, int client, const float *state, float *received);
int pfl_share_base_only(pfl_fl *fl);

/* The algorithm called `name` (built in or registered), or NULL with a
 * message listing the choices. */
const pfl_algo *pfl_algo_find(const char *name);

/* Adds a method written outside pfl (a program linking libpfl registers it
 * before it runs anything): afterwards pfl_algo_find and the experiment know
 * it like a built-in one. Its flags are its own `params` table; those with
 * no field in pfl_algo_params use PFL_BLOCK_EXTRA and are read in its hooks
 * with pfl_fl_param(fl, "flag-name"). `algo` must outlive every run. Returns
 * 0, or -1 with a message (no name, a name already taken, a bad table, or
 * more than PFL_MAX_REGISTERED methods). Not thread-safe: register first. */
#define PFL_MAX_REGISTERED 32
int pfl_algo_register(const pfl_algo *algo);

/* Every method, built in (pfl_algos, in order) then registered: i in
 * [0, pfl_algo_count()). */
int pfl_algo_count(void);
const pfl_algo *pfl_algo_at(int i);

#endif
