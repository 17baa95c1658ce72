/* The wiring of the base methods on the uneven federation (tests/wiring.h):
 * local, fedprox, fedper, fedrep, ditto, lgfedavg, fedbabu, fedbn, fedavg-c
 * and fedprox-c, and the draw of a round's clients every method relies on.
 *
 * Each method runs three rounds at lr 0.05 and --join 0.6 through the real
 * round loop, and every round is computed again here from the state the
 * round started from, with the step the method's paper says written out
 * with the engine's pieces (pfl_step_default, pfl_step_add_prox, frozen
 * rows, the stream of each pass): the clients pfl_select_clients draws are
 * trained, their uploads averaged in double by training samples over the
 * layers the method shares (wiring_mean), and each client's model after the
 * broadcast is the new global model under the parts it keeps (its own
 * trained ones if it trained, its older ones if not). After each round the
 * test compares, to float rounding (wiring_close): the run's global model,
 * every client's model as the run holds it, the model the run scores for
 * each client (the method's personal_model hook) with the one the method
 * should score, and each reported client accuracy with that model's.
 *
 * Why a wrong wiring fails here: the clients' training sizes differ (23, 7,
 * 15, 11, 30), so a uniform mean, a mean over the wrong clients or a weight
 * read from the wrong client moves the global model; three of five clients
 * train a round, so what an unselected client keeps (or loses) shows; every
 * hyper-parameter is set to a value other than its default, 0 and 1 (mu and
 * lambda 2.5, two head layers of three, two head, three personal, two
 * fine-tuning epochs, a decaying lr), so one ignored, replaced or with its
 * sign flipped changes the models; the passes of a round draw their own
 * streams, so reordered phases or a reused batch order change the bits; and
 * the scored model is compared as a vector, not only by an accuracy that
 * two different models can share. */
#include "wiring.h"

enum { N = WIRING_CLIENTS };

typedef struct base_case base_case;

/* A client's local training in round r from `held` (its model after the
 * broadcast; `global` the model the server sent): what it uploads and what
 * it keeps (whole vectors; only the kept layers count). */
typedef void (*base_train_fn)(wiring_fed *w, const base_case *bc, int client, int r, const float *held,
                              const float *global, float *upload, float *keep);
/* The model the method scores for `client` at the evaluation after round r. */
typedef void (*base_scored_fn)(wiring_fed *w, const base_case *bc, int client, int r, const float *held,
                               float *out);

struct base_case {
    const char *name;
    const pfl_algo *algo;
    wiring_model kind;
    bool shared[PFL_MAX_LAYERS]; /* the layers the server averages */
    bool kept[PFL_MAX_LAYERS];   /* the layers whose parameters a client keeps across the broadcast */
    bool kept_stats;             /* ... and the running statistics (BatchNorm kept local) */
    bool personalizes;           /* the scored models differ from the global one */
    base_train_fn train;
    base_scored_fn scored;
    /* the hyper-parameters as the test sets them */
    float mu, lambda;
    int first_head, head_epochs, personal_epochs, ft_epochs, fine_tune_epochs;
    bool fine_tune_every; /* FedBABU's --fine-tune-at every */
};

/* The reference of one run: per round, the expectation computed here. */
typedef struct {
    const base_case *bc;
    float *start;          /* the global model the round started from */
    float *expect_global;  /* the global model the round should leave */
    float *kept[N];        /* what each client keeps now (its kept layers) */
    float *kept_next[N];   /* ... after the round computed ahead */
    float *held[N];        /* each client's model now: the run's global under its kept parts */
    float *expect_held[N]; /* each client's model the round should leave */
    float *uploads[N];
    float *want, *scratch;
    int rounds_checked, evaluations_checked;
    bool personal_seen; /* some scored model differs from the global one */
} base_ref;

/* ---- the pieces of a round, written out ---- */

static size_t model_len(const wiring_fed *w) { return w->V; }

/* out = global with the kept parts of `own` written over it. */
static void compose(const wiring_fed *w, const base_case *bc, const float *global, const float *own, float *out) {
    const pfl_model *m = w->f.fl.model;
    memcpy(out, global, model_len(w) * sizeof(float));
    for (int l = 0; l < m->num_layers; l++) {
        const pfl_layer *ly = &m->layers[l];
        if (bc->kept[l]) memcpy(out + ly->offset, own + ly->offset, ly->length * sizeof(float));
        if (bc->kept_stats && ly->state_length)
            memcpy(out + ly->state_offset, own + ly->state_offset, ly->state_length * sizeof(float));
    }
}

/* FedAvg's step of round r on `model`, in place. */
static void train_default(wiring_fed *w, int client, int r, float *model) {
    pfl_step s = wiring_default_step(w, r);
    wiring_train(w, client, r, model, &s);
}

/* A method that trains one model: it uploads and keeps what it trained. */
static void one_model(const wiring_fed *w, const float *held, float *upload) {
    memcpy(upload, held, model_len(w) * sizeof(float));
}

static void train_fedavg(wiring_fed *w, const base_case *bc, int client, int r, const float *held,
                         const float *global, float *upload, float *keep) {
    (void)bc, (void)global;
    one_model(w, held, upload);
    train_default(w, client, r, upload);
    memcpy(keep, upload, model_len(w) * sizeof(float));
}

/* FedProx: loss + mu/2 ||w - w_global||^2, the global model as received. */
static void train_fedprox(wiring_fed *w, const base_case *bc, int client, int r, const float *held,
                          const float *global, float *upload, float *keep) {
    one_model(w, held, upload);
    pfl_step s = wiring_default_step(w, r);
    pfl_step_add_prox(&s, bc->mu, global, 0, w->P);
    wiring_train(w, client, r, upload, &s);
    memcpy(keep, upload, model_len(w) * sizeof(float));
}

/* rows[l] = true for the layers at or above first_head (head) or below it. */
static void mark_layers(const wiring_fed *w, int first_head, bool head, bool *rows) {
    for (int l = 0; l < PFL_MAX_LAYERS; l++) rows[l] = false;
    for (int l = 0; l < w->f.fl.model->num_layers; l++) rows[l] = head ? l >= first_head : l < first_head;
}

/* FedRep: --head-epochs on the head with the base frozen, then --epochs on
 * the base with the head frozen, each pass its own batch order. */
static void train_fedrep(wiring_fed *w, const base_case *bc, int client, int r, const float *held,
                         const float *global, float *upload, float *keep) {
    (void)global;
    bool base_rows[PFL_MAX_LAYERS], head_rows[PFL_MAX_LAYERS];
    mark_layers(w, bc->first_head, false, base_rows);
    mark_layers(w, bc->first_head, true, head_rows);
    one_model(w, held, upload);
    pfl_step head = wiring_default_step(w, r);
    head.epochs = bc->head_epochs, head.opt.frozen = base_rows;
    wiring_train(w, client, r, upload, &head);
    pfl_step base = wiring_default_step(w, r);
    base.opt.frozen = head_rows, base.shuffle = PFL_RNG_SHUFFLE_PERSONAL;
    wiring_train(w, client, r, upload, &base);
    memcpy(keep, upload, model_len(w) * sizeof(float));
}

/* Ditto: the personal model v (what the client keeps) trained
 * --personal-epochs with lambda/2 ||v - w_global||^2 on its own stream; the
 * upload is the received global model after --epochs of plain SGD. */
static void train_ditto(wiring_fed *w, const base_case *bc, int client, int r, const float *held,
                        const float *global, float *upload, float *keep) {
    memcpy(keep, held, model_len(w) * sizeof(float));
    pfl_step personal = wiring_default_step(w, r);
    personal.epochs = bc->personal_epochs, personal.shuffle = PFL_RNG_SHUFFLE_PERSONAL;
    pfl_step_add_prox(&personal, bc->lambda, global, 0, w->P);
    wiring_train(w, client, r, keep, &personal);
    memcpy(upload, global, model_len(w) * sizeof(float));
    train_default(w, client, r, upload);
}

/* FedBABU: the body alone learns; the head stays as initialized. */
static void train_fedbabu(wiring_fed *w, const base_case *bc, int client, int r, const float *held,
                          const float *global, float *upload, float *keep) {
    (void)global;
    bool head_rows[PFL_MAX_LAYERS];
    mark_layers(w, bc->first_head, true, head_rows);
    one_model(w, held, upload);
    pfl_step s = wiring_default_step(w, r);
    s.opt.frozen = head_rows;
    wiring_train(w, client, r, upload, &s);
    memcpy(keep, upload, model_len(w) * sizeof(float));
}

/* FedAvg-C's local initialization: --ft-epochs of cross-entropy SGD on the
 * FINETUNE stream of the round it prepares, at that round's rate. */
static void fine_tune(wiring_fed *w, const base_case *bc, int client, int r, float *model) {
    pfl_step s = wiring_default_step(w, r);
    s.epochs = bc->ft_epochs, s.shuffle = PFL_RNG_FINETUNE;
    wiring_train(w, client, r, model, &s);
}

static void train_fedavg_c(wiring_fed *w, const base_case *bc, int client, int r, const float *held,
                           const float *global, float *upload, float *keep) {
    one_model(w, held, upload);
    fine_tune(w, bc, client, r, upload);
    pfl_step s = wiring_default_step(w, r);
    if (bc->mu > 0) pfl_step_add_prox(&s, bc->mu, global, 0, w->P); /* FedProx-C */
    wiring_train(w, client, r, upload, &s);
    memcpy(keep, upload, model_len(w) * sizeof(float));
}

/* ---- the scored models ---- */

static void scored_held(wiring_fed *w, const base_case *bc, int client, int r, const float *held, float *out) {
    (void)bc, (void)client, (void)r;
    memcpy(out, held, model_len(w) * sizeof(float));
}

/* FedAvg-C: the held model fine-tuned as the next round will. */
static void scored_fine_tuned(wiring_fed *w, const base_case *bc, int client, int r, const float *held, float *out) {
    memcpy(out, held, model_len(w) * sizeof(float));
    fine_tune(w, bc, client, r + 1, out);
}

/* FedBABU: the held model, fine-tuned whole for --fine-tune-epochs on the
 * ALGO stream of the round, after the last round (--fine-tune-at last) or
 * at every evaluation (every). */
static void scored_fedbabu(wiring_fed *w, const base_case *bc, int client, int r, const float *held, float *out) {
    memcpy(out, held, model_len(w) * sizeof(float));
    if (r < w->f.fl.cfg.rounds && !bc->fine_tune_every) return;
    pfl_step s = wiring_default_step(w, r);
    s.epochs = bc->fine_tune_epochs, s.shuffle = PFL_RNG_ALGO;
    wiring_train(w, client, r, out, &s);
}

/* ---- the round computed ahead, and the checks after it ---- */

/* Round r from the run's state after round r - 1 (ref->held). */
static void base_expect(wiring_fed *w, base_ref *ref, int r) {
    const base_case *bc = ref->bc;
    const size_t V = model_len(w);
    int sel[N];
    const int n = wiring_selected(w, r, sel);
    double weight[N];
    memcpy(ref->start, w->f.fl.global, V * sizeof(float));
    for (int c = 0; c < N; c++) memcpy(ref->kept_next[c], ref->kept[c], V * sizeof(float));
    for (int k = 0; k < n; k++)
        bc->train(w, bc, sel[k], r, ref->held[sel[k]], ref->start, ref->uploads[k], ref->kept_next[sel[k]]);
    wiring_sample_weights(sel, n, weight);
    memcpy(ref->expect_global, ref->start, V * sizeof(float));
    for (int l = 0; l < w->f.fl.model->num_layers; l++)
        if (bc->shared[l])
            wiring_mean(ref->expect_global, ref->uploads, weight, n, wiring_layer_off(w, l), wiring_layer_len(w, l));
    for (int c = 0; c < N; c++) compose(w, bc, ref->expect_global, ref->kept_next[c], ref->expect_held[c]);
}

/* After round r > 0: the global model and every client's model. */
static void base_check_round(wiring_fed *w, base_ref *ref, int round) {
    const char *name = ref->bc->name;
    const size_t V = model_len(w);
    CHECK(wiring_close(w->f.fl.global, ref->expect_global, 0, V),
          "%s round %d: the global model is not the sample-weighted mean of the selected clients' shared layers "
          "(max diff %g)",
          name, round, wiring_max_diff(w->f.fl.global, ref->expect_global, 0, V));
    for (int c = 0; c < N; c++) {
        memcpy(ref->kept[c], ref->kept_next[c], V * sizeof(float));
        if (!w->f.fl.client_state) continue;
        const float *got = wiring_client_model(w, c, ref->scratch);
        CHECK(wiring_close(got, ref->expect_held[c], 0, V),
              "%s round %d client %d: its model after the broadcast is not the global one under the parts it keeps "
              "(max diff %g)",
              name, round, c, wiring_max_diff(got, ref->expect_held[c], 0, V));
        pfl_fl_release_client(&w->f.fl, c);
    }
    ref->rounds_checked++;
}

/* At an evaluation: the model the run scores for each client (the
 * method's personal_model hook, as the evaluation calls it) and the
 * accuracy it reported, against the model the method should score. */
static void base_check_scored(wiring_fed *w, base_ref *ref, int round) {
    const base_case *bc = ref->bc;
    pfl_fl *fl = &w->f.fl;
    const size_t V = model_len(w);
    const float *(*personal)(pfl_fl *, int, float *) =
        fl->algo->personal_model ? fl->algo->personal_model : pfl_default_personal_model;
    for (int c = 0; c < N; c++) {
        bc->scored(w, bc, c, round, ref->held[c], ref->want);
        const float *got = personal(fl, c, ref->scratch);
        CHECK(wiring_close(got, ref->want, 0, V), "%s round %d client %d: the scored model is not the method's (max diff %g)",
              bc->name, round, c, wiring_max_diff(got, ref->want, 0, V));
        pfl_fl_release_client(fl, c);
        const double acc = wiring_accuracy(w, ref->want, c, true);
        CHECK(fabs(w->rounds[round].client_acc[c] - acc) < 1e-12, "%s round %d client %d: scored %g, the method's model %g",
              bc->name, round, c, w->rounds[round].client_acc[c], acc);
        if (wiring_differ(ref->want, fl->global, 0, w->P)) ref->personal_seen = true;
    }
    ref->evaluations_checked++;
}

static int base_hook(wiring_fed *w, int round, void *ctx) {
    base_ref *ref = ctx;
    if (round == 0) /* every client starts from the initial global model */
        for (int c = 0; c < N; c++) memcpy(ref->kept[c], w->f.fl.global, model_len(w) * sizeof(float));
    else base_check_round(w, ref, round);
    for (int c = 0; c < N; c++) compose(w, ref->bc, w->f.fl.global, ref->kept[c], ref->held[c]);
    if (w->rounds[round].evaluated) base_check_scored(w, ref, round);
    if (round < w->f.fl.cfg.rounds) base_expect(w, ref, round + 1);
    return 0;
}

static void base_ref_init(base_ref *ref, const base_case *bc, size_t V) {
    memset(ref, 0, sizeof *ref);
    ref->bc = bc;
    ref->start = tiny_floats(V), ref->expect_global = tiny_floats(V);
    ref->want = tiny_floats(V), ref->scratch = tiny_floats(V);
    for (int c = 0; c < N; c++) {
        ref->kept[c] = tiny_floats(V), ref->kept_next[c] = tiny_floats(V), ref->held[c] = tiny_floats(V);
        ref->expect_held[c] = tiny_floats(V), ref->uploads[c] = tiny_floats(V);
    }
}

static void base_ref_free(base_ref *ref) {
    free(ref->start), free(ref->expect_global), free(ref->want), free(ref->scratch);
    for (int c = 0; c < N; c++) {
        free(ref->kept[c]), free(ref->kept_next[c]), free(ref->held[c]), free(ref->expect_held[c]);
        free(ref->uploads[c]);
    }
}

/* The --bn a method's run_defaults set (FedBN: local), as `pfl run` starts from. */
static void apply_method_bn(pfl_config *cfg, const pfl_algo *algo) {
    for (const char *const *d = algo->run_defaults; d && d[0]; d += 2)
        if (!strcmp(d[0], "bn"))
            cfg->bn = !strcmp(d[1], "local") ? PFL_BN_LOCAL : !strcmp(d[1], "shared") ? PFL_BN_SHARED : PFL_BN_STATS_LOCAL;
}

/* Runs the case under cfg and checks every round and evaluation. */
static void base_run(const base_case *bc, const pfl_config *cfg) {
    wiring_fed w;
    wiring_init(&w, bc->algo, cfg, bc->kind);
    base_ref ref;
    base_ref_init(&ref, bc, w.V);
    CHECK(wiring_run(&w, base_hook, &ref) == 0, "%s: the run failed", bc->name);
    CHECK(ref.rounds_checked == cfg->rounds && ref.evaluations_checked == cfg->rounds + 1,
          "%s: %d rounds and %d evaluations checked", bc->name, ref.rounds_checked, ref.evaluations_checked);
    CHECK(ref.personal_seen == bc->personalizes, "%s: the scored models %s the global one", bc->name,
          ref.personal_seen ? "differ from" : "are all");
    base_ref_free(&ref);
    wiring_free(&w);
}

/* ---- the cases ---- */

static base_case case_of(const char *name, const pfl_algo *algo, wiring_model kind, base_train_fn train) {
    base_case bc;
    memset(&bc, 0, sizeof bc);
    bc.name = name, bc.algo = algo, bc.kind = kind, bc.train = train, bc.scored = scored_held;
    return bc;
}

/* Layers [0, first) shared or kept by the rule: head_kept keeps the top ones. */
static void split_layers(base_case *bc, int num_layers, int first_head, bool head_kept) {
    bc->first_head = first_head;
    for (int l = 0; l < num_layers; l++) {
        const bool head = l >= first_head;
        bc->kept[l] = head == head_kept;
        bc->shared[l] = !bc->kept[l];
    }
}

static void share_all(base_case *bc, int num_layers) {
    for (int l = 0; l < num_layers; l++) bc->shared[l] = true;
}

enum { MLP3_LAYERS = 3, TWO_HEAD_LAYERS = 2, MLP3_FIRST_HEAD = MLP3_LAYERS - TWO_HEAD_LAYERS };

/* Local: nothing shared, every client keeps its own model and is scored on it. */
static void test_local(void) {
    base_case bc = case_of("local", &pfl_algo_local, WIRING_DNN, train_fedavg);
    for (int l = 0; l < 2; l++) bc.kept[l] = true;
    bc.personalizes = true;
    pfl_config cfg = wiring_config(bc.algo, bc.kind);
    base_run(&bc, &cfg);
}

/* FedProx at mu 2.5: the proximal term toward the received global model. */
static void test_fedprox(void) {
    base_case bc = case_of("fedprox", &pfl_algo_fedprox, WIRING_DNN, train_fedprox);
    share_all(&bc, 2);
    bc.mu = 2.5f;
    pfl_config cfg = wiring_config(bc.algo, bc.kind);
    wiring_set(&cfg, bc.algo, "mu", bc.mu);
    cfg.epochs = 2;
    base_run(&bc, &cfg);
}

/* FedPer with two head layers of MLP3: the base (fc1) shared, the head kept. */
static void test_fedper(void) {
    base_case bc = case_of("fedper", &pfl_algo_fedper, WIRING_MLP3, train_fedavg);
    split_layers(&bc, MLP3_LAYERS, MLP3_FIRST_HEAD, true);
    bc.personalizes = true;
    pfl_config cfg = wiring_config(bc.algo, bc.kind);
    wiring_set(&cfg, bc.algo, "head-layers", TWO_HEAD_LAYERS);
    base_run(&bc, &cfg);
}

/* FedRep: two head layers, two head epochs, then one base epoch. */
static void test_fedrep(void) {
    base_case bc = case_of("fedrep", &pfl_algo_fedrep, WIRING_MLP3, train_fedrep);
    split_layers(&bc, MLP3_LAYERS, MLP3_FIRST_HEAD, true);
    bc.personalizes = true, bc.head_epochs = 2;
    pfl_config cfg = wiring_config(bc.algo, bc.kind);
    wiring_set(&cfg, bc.algo, "head-layers", TWO_HEAD_LAYERS);
    wiring_set(&cfg, bc.algo, "head-epochs", bc.head_epochs);
    base_run(&bc, &cfg);
}

/* Ditto at lambda 2.5 and three personal epochs: v kept and scored, the
 * global copy uploaded. */
static void test_ditto(void) {
    base_case bc = case_of("ditto", &pfl_algo_ditto, WIRING_DNN, train_ditto);
    for (int l = 0; l < 2; l++) bc.kept[l] = bc.shared[l] = true; /* v kept whole; the copies averaged */
    bc.personalizes = true, bc.lambda = 2.5f, bc.personal_epochs = 3;
    pfl_config cfg = wiring_config(bc.algo, bc.kind);
    wiring_set(&cfg, bc.algo, "lambda", bc.lambda);
    wiring_set(&cfg, bc.algo, "personal-epochs", bc.personal_epochs);
    base_run(&bc, &cfg);
}

/* LG-FedAvg with two shared head layers of MLP3: fc1 kept by each client. */
static void test_lgfedavg(void) {
    base_case bc = case_of("lgfedavg", &pfl_algo_lgfedavg, WIRING_MLP3, train_fedavg);
    split_layers(&bc, MLP3_LAYERS, MLP3_FIRST_HEAD, false);
    bc.personalizes = true;
    pfl_config cfg = wiring_config(bc.algo, bc.kind);
    wiring_set(&cfg, bc.algo, "head-layers", TWO_HEAD_LAYERS);
    base_run(&bc, &cfg);
}

/* FedBABU with two frozen head layers and two fine-tuning epochs after the
 * last round (--fine-tune-at last: the global model scored before), or at
 * every evaluation (every). */
static void test_fedbabu(bool every) {
    base_case bc = case_of(every ? "fedbabu (every)" : "fedbabu", &pfl_algo_fedbabu, WIRING_MLP3, train_fedbabu);
    bc.first_head = MLP3_FIRST_HEAD;
    for (int l = 0; l < MLP3_FIRST_HEAD; l++) bc.shared[l] = true;
    bc.scored = scored_fedbabu, bc.personalizes = true, bc.fine_tune_epochs = 2, bc.fine_tune_every = every;
    pfl_config cfg = wiring_config(bc.algo, bc.kind);
    wiring_set(&cfg, bc.algo, "head-layers", TWO_HEAD_LAYERS);
    wiring_set(&cfg, bc.algo, "fine-tune-epochs", bc.fine_tune_epochs);
    if (every) cfg.algo.fine_tune_at = "every";
    base_run(&bc, &cfg);
}

/* FedBN on the BatchNorm model under its own --bn: conv1 and fc averaged,
 * bn1's weight, bias and running statistics kept by each client. */
static void test_fedbn(void) {
    base_case bc = case_of("fedbn", &pfl_algo_fedbn, WIRING_BN, train_fedavg);
    const int bn_layer = 1; /* conv1, bn1, fc */
    share_all(&bc, 3);
    bc.shared[bn_layer] = false, bc.kept[bn_layer] = true, bc.kept_stats = true, bc.personalizes = true;
    pfl_config cfg = wiring_config(bc.algo, bc.kind);
    apply_method_bn(&cfg, bc.algo);
    base_run(&bc, &cfg);
}

/* FedAvg-C and FedProx-C: two fine-tuning epochs, a decaying rate, FedProx-C
 * at mu 2.5; the fine-tuned model scored and trained from. */
static void test_fedavg_c(const pfl_algo *algo, float mu) {
    base_case bc = case_of(algo->name, algo, WIRING_DNN, train_fedavg_c);
    share_all(&bc, 2);
    bc.scored = scored_fine_tuned, bc.personalizes = true, bc.ft_epochs = 2, bc.mu = mu;
    pfl_config cfg = wiring_config(bc.algo, bc.kind);
    wiring_set(&cfg, bc.algo, "ft-epochs", bc.ft_epochs);
    if (mu > 0) wiring_set(&cfg, bc.algo, "mu", mu);
    cfg.lr_decay = 0.8f;
    base_run(&bc, &cfg);
}

/* The round's clients every method trains: round(join N) distinct ones,
 * ascending, drawn afresh each round, so that over many rounds each client
 * joins about join of them and the rounds do not all draw the same set. */
static void test_selection(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedavg, WIRING_DNN);
    enum { ROUNDS = 60 };
    int joined[N] = {0}, first[N], same_as_first = 0;
    for (int r = 1; r <= ROUNDS; r++) {
        int sel[N];
        const int n = pfl_select_clients(&cfg, r, sel);
        CHECK(n == 3, "selection round %d: %d clients, not round(0.6 x 5) = 3", r, n);
        bool same = r > 1;
        for (int k = 0; k < n; k++) {
            CHECK(sel[k] >= 0 && sel[k] < N && (k == 0 || sel[k - 1] < sel[k]),
                  "selection round %d: not distinct ascending clients", r);
            joined[sel[k]]++;
            if (r == 1) first[k] = sel[k];
            else same = same && sel[k] == first[k];
        }
        same_as_first += same;
    }
    for (int c = 0; c < N; c++)
        CHECK(joined[c] >= 20 && joined[c] <= 52, "selection: client %d joined %d of %d rounds (expected about %d)", c,
              joined[c], ROUNDS, ROUNDS * 3 / N);
    CHECK(same_as_first < ROUNDS / 3, "selection: %d of %d rounds drew round 1's clients again", same_as_first, ROUNDS - 1);
}

int main(void) {
    test_selection();
    test_local();
    test_fedprox();
    test_fedper();
    test_fedrep();
    test_ditto();
    test_lgfedavg();
    test_fedbabu(false);
    test_fedbabu(true);
    test_fedbn();
    test_fedavg_c(&pfl_algo_fedavg_c, 0.0f);
    test_fedavg_c(&pfl_algo_fedprox_c, 2.5f);
    TEST_MAIN_END();
}
