/* The typed parameter blocks that methods read (fl->cfg.algo) and modules
 * read (fl->cfg.modules). They live here, below the round loop (src/fl), so
 * that the modules, which know nothing of the round loop, can declare the
 * flags that set them (src/modules/ala.c, flayer.c) as methods declare
 * theirs (src/algos/). Which flag sets which field, with which default, is
 * in those tables, not here. */
#ifndef PFL_MODULES_CONFIG_H
#define PFL_MODULES_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "util/params.h"

/* The head of a parameter table entry that sets pfl_algo_params.FIELD
 * (PFL_BLOCK_ALGO) or pfl_modules_config.FIELD (PFL_BLOCK_MODULES) with the
 * flag --FLAG; the entry goes on with .def, .min, .max, .metavar, .help:
 *   {PFL_ALGO_PARAM(FLOAT, "mu", mu), .def = 0.001, .max = 1e6, .metavar = "F", .help = "..."} */
#define PFL_ALGO_PARAM(TYPE, FLAG, FIELD)                                                                      \
    .name = FLAG, .type = PFL_PARAM_##TYPE, .block = PFL_BLOCK_ALGO, .offset = offsetof(pfl_algo_params, FIELD)
#define PFL_MODULES_PARAM(TYPE, FLAG, FIELD)                                                                   \
    .name = FLAG, .type = PFL_PARAM_##TYPE, .block = PFL_BLOCK_MODULES, .offset = offsetof(pfl_modules_config, FIELD)

/* Hyperparameters of the algorithms that have them (flags and defaults: each method's table). */
typedef struct {
    float mu;             /* fedprox: proximal coefficient */
    float lambda;         /* ditto: proximal coefficient of the personal model */
    int personal_epochs;  /* ditto: local epochs of the personal model per round */
    int head_layers;      /* fedper, fedrep, flayer: layers in the personal head (s) */
    int head_epochs;      /* fedrep: epochs on the head (base frozen) before the base epochs */
    /* fedamp, pfedcfr: attentive message passing (src/algos/amp.h) */
    float amp_alpha;      /* alpha_k: weight of the messages, xi_ij = alpha * A'(||w_i - w_j||^2) */
    float amp_sigma;      /* sigma of A(x) = 1 - exp(-x / sigma) */
    float amp_lambda;     /* lambda: proximal coefficient lambda / alpha toward the fused model */
    int cfr_layers;       /* pfedcfr: r, the first r units of layer_unit fused per client, the rest averaged */
    int layer_unit;       /* pfl_layer_unit (nn/layer_units.h) of --layer-unit: rows (0), tensors, blocks */
    int local_steps;      /* every algorithm: a local epoch is this many batches (reshuffling after
                           * each pass over the data) instead of one pass; 0 = whole passes */
    /* FedALP (src/algos/fedalp.h) */
    int groups;           /* fedalp: M, groups of clients */
    float beta;           /* fedalp: personalization factor in [0, 1] */
    double warmup;        /* fedalp: T_pre, a fraction of the rounds if < 1, else a count */
    bool fedalp_all_tests; /* fedalp: also score each client's model on every client's test split */
    /* pFedMe (src/algos/pfedme.c) */
    int pfedme_k;         /* K: inner steps on the personal problem per batch */
    float pfedme_lambda;  /* lambda: Moreau-envelope coefficient */
    float pfedme_lr;      /* personal learning rate of the inner steps */
    float pfedme_beta;    /* server: w_g = (1 - beta) w_g + beta * mean of uploads */
    /* CFL (src/algos/cfl.h) */
    float cfl_eps1;       /* split a cluster when its mean update norm is below this ... */
    float cfl_eps2;       /* ... and its largest client update norm above this */
    int cfl_warmup;       /* no split in rounds 1..cfl_warmup */
    /* FedTSDP (src/algos/fedtsdp.h) */
    int tsdp_public;        /* |D_pub|: the dataset's LAST tsdp_public samples, held by the server, labels unused */
    int tsdp_public_batch;  /* |D_B|: public samples drawn per round (0: cfg.batch) */
    float tsdp_eps1;        /* DBSCAN eps of stage one (JS divergences) */
    float tsdp_eps2;        /* DBSCAN eps of stage two (weight distances, Eq. 9) */
    int tsdp_min_pts;       /* DBSCAN minPts of both stages */
    float tsdp_h_th;        /* cluster when the Hopkins statistic H > h_th */
    float tsdp_psi;         /* L_s *= psi each time both stages run (Eq. 11) */
    double tsdp_shared;     /* initial L_s (0: every layer) */
    int tsdp_hopkins_m;     /* Hopkins sample size m~ (0: max(1, m / 10) of the m clients) */
    bool tsdp_shrink_on_change; /* L_s shrinks only at a clustering that changes the grouping (default: every one) */
    bool tsdp_noise_singletons; /* each DBSCAN noise client a cluster alone (default: a run's noise one group) */
    /* methods that change the model: FedBABU, APFL, FedCP, GPFL */
    int fine_tune_epochs;   /* fedbabu: whole-model fine-tuning epochs of the personalized model */
    const char *fine_tune_at; /* fedbabu: "last" (NULL: after the last round) | "every" (at every evaluation) */
    float apfl_alpha;       /* apfl: initial mixing weight of the local model */
    float fedcp_lambda;     /* fedcp: weight of the MMD between the trained and the received features */
    float gpfl_lambda;      /* gpfl: weight of the magnitude-level guidance ||f_G - e_y|| */
    float gpfl_mu;          /* gpfl: weight decay of the CoV and GCE parameters */
    /* FedALA's baselines: FedAvg-C, FedProx-C, Per-FedAvg, FedPHP */
    int ft_epochs;          /* fedavg-c, fedprox-c: epochs of fine-tuning of the received model */
    float perfedavg_alpha;  /* perfedavg: alpha, the personalization step (0: --lr) */
    float perfedavg_beta;   /* perfedavg: beta, the meta step (0: --lr) */
    int perfedavg_steps;    /* perfedavg: steps of size alpha that personalize the model evaluated */
    bool perfedavg_hf;      /* perfedavg: Hessian-free variant (Hessian-vector products by differences) */
    float perfedavg_delta;  /* perfedavg: delta of those differences */
    float php_mu;           /* fedphp: mu, the largest moving-average weight of the inherited model */
    float php_lambda;       /* fedphp: lambda, weight of the MMD term in the local loss */
    /* methods that download several models: FedFomo, APPLE; and PartialFed */
    int fomo_m;             /* fedfomo: M, the client models a client downloads (0: every client's) */
    float fomo_val;         /* fedfomo: fraction of a client's training split held out to weigh them */
    float apple_dr_lr;      /* apple: eta_2, learning rate of the directed-relationship vector p_i */
    float apple_mu;         /* apple: mu, coefficient of the pull of p_i toward p_i^(0) */
    float apple_l;          /* apple: L, the fraction of the rounds during which the pull lasts */
    const char *apple_scheduler; /* apple: the pull's schedule over those rounds: cos | exp */
    float apple_core_scale; /* apple: the core's rate is lr times this (0: the number of clients, as PFLlib) */
    float pf_tau;           /* partialfed: Gumbel-softmax temperature in round 1 */
    float pf_tau_decay;     /* partialfed: the temperature of round r is tau * decay^(r-1) */
    int pf_fm, pf_fs;       /* partialfed: f_m model batches, then f_s strategy batches, in turn */
    float pf_lr;            /* partialfed: learning rate of the strategy's logits */
    /* methods that exchange class prototypes: FedProto, FD, FedPCL, FedGH, FedPAC (src/algos/protos.h) */
    float proto_lambda;     /* fedproto, fedpac: weight of the squared distance to the global prototypes */
    float fd_lambda;        /* fd: weight of the distillation toward the global average logits */
    const char *fd_target;  /* fd: the distillation's target: logits (PFLlib: the raw average) | softmax */
    float pcl_tau;          /* fedpcl: temperature of the similarities to the prototypes */
    float gh_server_lr;     /* fedgh: learning rate of the server's training of the header */
    const char *gh_start;   /* fedgh: what the server's header training starts from: client0 | global */
    /* traditional methods: SCAFFOLD, FedDyn, FedLC, FedNTD */
    float server_lr;         /* scaffold and the server optimizers: eta_g, the server's step along the mean update */
    /* scaffold, feddyn, the server optimizers: the mean of the uploads, uniform | samples (NULL: uniform) */
    const char *server_mean;
    float dyn_alpha;         /* feddyn: alpha, the dynamic regularizer's coefficient */
    const char *dyn_penalty; /* feddyn: alpha/2 ||w - w_global|| (norm, PFLlib) or its square (squared, the paper) */
    float lc_tau;            /* fedlc: tau of the calibration tau * n_y^(-1/4) */
    const char *lc_counts;   /* fedlc: n_y over every client's training labels (global) or the client's (local) */
    float ntd_beta;          /* fedntd: beta, the weight of the not-true distillation */
    float ntd_tau;           /* fedntd: tau, its softmax temperature */
    /* server optimizers on the round's mean update: FedAvgM, FedAdam, FedYogi, FedAdagrad (src/algos/server_opt.c);
     * their step size is server_lr and their mean server_mean */
    float server_momentum;   /* fedavgm: beta, the momentum of the server's update */
    bool server_nesterov;    /* fedavgm: Nesterov's momentum (FL-bench's torch.optim.SGD(nesterov=True)) */
    float server_beta1;      /* fedadam, fedyogi, fedadagrad: beta_1, the decay of the first moment m */
    float server_beta2;      /* fedadam, fedyogi: beta_2, the decay of the second moment v */
    float server_tau;        /* fedadam, fedyogi, fedadagrad: tau, the adaptivity; v starts at tau^2 */
    /* FedADMM (src/algos/fedadmm.c): its server step is server_lr, its mean server_mean */
    float admm_rho;          /* fedadmm: rho, the augmented Lagrangian's penalty */
    float admm_eta2;         /* fedadmm: the server's step after admm_target_round rounds */
    int admm_target_round;   /* fedadmm: the rounds at server_lr */
    const char *admm_epochs; /* fedadmm: random (uniform in 1..epochs, the paper's) | fixed (NULL: random) */
    /* apple, apfl, fedphp, perfedavg: where the method's paper and its reference code (PFLlib) disagree, which
     * one to follow: "pfllib" (NULL: the default) | "paper" (pfl_reading_paper, docs/algorithms.md) */
    const char *reading;
    /* PFLlib's personalized methods: FML, FedKD, FedDBE, FedMTL */
    float fml_alpha;        /* fml: weight of the personal model's cross-entropy (1 - alpha: its KL term) */
    float fml_beta;         /* fml: weight of the meme model's cross-entropy (1 - beta: its KL term) */
    bool fml_detach;        /* fml: each KL term's target held fixed (PFLlib: both terms reach both models) */
    float kd_mentee_lr;     /* fedkd: learning rate of the mentee, the model exchanged */
    float kd_t_start;       /* fedkd: energy the SVD keeps in round 1 ... */
    float kd_t_end;         /* ... growing linearly to this after the last round */
    bool kd_update;         /* fedkd: compress the update (the paper) instead of the weights (PFLlib) */
    bool kd_paper_rank;     /* fedkd: keep every singular value when fewer do not reach the energy (the paper) */
    float dbe_momentum;     /* feddbe: momentum of the representation's running mean */
    float dbe_klw;          /* feddbe: weight of the mean regularization */
    bool mtl_reg_grad;      /* fedmtl: the regularizer's gradient reaches the model (PFLlib: none) */
    /* PFLlib's personalized methods: FedCAC, FedAS, PFL-DA, FedGC */
    double cac_tau;         /* fedcac: tau, the fraction of each tensor's parameters marked critical */
    int cac_beta;           /* fedcac: beta, rounds over which the collaboration threshold reaches the largest overlap */
    const char *cac_round1; /* fedcac: where the critical parameters come from after round 1: initial | customized */
    float as_align_lr;      /* fedas: learning rate of the parameter alignment of the received extractor */
    int as_align_epochs;    /* fedas: epochs of that alignment */
    float da_lambda;        /* pfl-da: lambda, weight of ||global head - personal head|| in the head's loss */
    bool da_reg_grad;       /* pfl-da: that term has a gradient (PFLlib's is computed from .data: none) */
    float gc_lambda;        /* fedgc: the server's classifier correction steps at lr x this */
    /* PFLlib's traditional methods: MOON, FedGen, FedCross */
    float moon_mu;          /* moon: mu, weight of the model-contrastive loss */
    float moon_tau;         /* moon: tau, its temperature */
    int fedgen_noise_dim;   /* fedgen: width of the generator's noise input */
    int fedgen_hidden;      /* fedgen: width of its hidden layer */
    float fedgen_lr;        /* fedgen: learning rate of its Adam steps */
    int fedgen_server_epochs; /* fedgen: its steps on the server per round */
    float fedcross_alpha;   /* fedcross: the weight a middleware model keeps of itself */
    int fedcross_select;    /* fedcross: collaborator: 0 in turn, 1 least similar, 2 most similar */
    int fedcross_first_stage; /* fedcross: rounds before cross-aggregation begins */
} pfl_algo_params;

/* Modules any algorithm can switch on (DESIGN.md §2): FedALA's adaptive local
 * aggregation, and FLAYER's head mix, per-layer learning rates and upload mask. */
typedef struct {
    bool ala;
    int ala_p;              /* top layers ALA mixes */
    float ala_s;            /* percent of the training split ALA learns on */
    float ala_eta;          /* learning rate of the ALA weights */
    float ala_threshold;    /* first active round: stop when the std of the last 10 epoch losses is below */
    int ala_max_epochs;     /* ... or after this many epochs (with a warning) */
    bool flayer_agg;        /* head = A*local + (1-A)*global, A = the client's last local accuracy */
    bool flayer_lr;         /* per-layer learning rates (FLAYER Eq. 4) */
    bool flayer_mask;       /* upload the top UP_i fraction of each layer's changes (Eq. 5-9) */
    bool flayer_mask_literal; /* aggregate masked uploads as Eq. 9 reads: unsent elements count as 0 */
} pfl_modules_config;

/* Modules an algorithm switches on by itself (FedALA is FedAvg + ALA). */
enum {
    PFL_MODULE_ALA = 1,
    PFL_MODULE_FLAYER_AGG = 2,
    PFL_MODULE_FLAYER_LR = 4,
    PFL_MODULE_FLAYER_MASK = 8,
};

#endif
