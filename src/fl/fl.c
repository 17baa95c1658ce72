#include "fl/fl.h"
#include "fl/loop.h"

#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "modules/modules.h"
#include "nn/blas.h"
#include "util/err.h"
#include "util/sha256.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- workers ---- */

static int largest_client(const pfl_partition *part) {
    int most = 1;
    for (int c = 0; c < part->num_clients; c++) {
        const pfl_client_data *cd = &part->clients[c];
        if (cd->n_train > most) most = cd->n_train;
        if (cd->n_test > most) most = cd->n_test;
    }
    return most;
}

static void worker_free(pfl_worker *w) {
    if (w->exec) {
        pfl_exec_free_buf(w->exec, &w->grads);
        pfl_exec_free_buf(w->exec, &w->velocity);
        pfl_exec_free_buf(w->exec, &w->aux_grads);
        pfl_exec_destroy(w->exec);
    }
    free(w->model);
    free(w->order);
    free(w->received);
    free(w->start);
    free(w->aux);
    free(w->own);
}

static int worker_init(pfl_worker *w, int id, const pfl_fl *fl) {
    memset(w, 0, sizeof *w);
    w->id = id;
    /* model copies hold parameters and state (V); gradients and optimizer
     * buffers the parameters only (P) */
    const size_t P = fl->model->num_params, V = pfl_model_vector_len(fl->model);
    const int max_batch = fl->cfg.batch > fl->cfg.eval_batch ? fl->cfg.batch : fl->cfg.eval_batch;
    const pfl_backend *be = fl->cfg.backend ? fl->cfg.backend : &pfl_backend_cpu;
    if (!(w->exec = pfl_exec_create(be, fl->model, fl->data, max_batch))) return -1;
    if (pfl_exec_alloc(w->exec, &w->grads, P) || pfl_exec_alloc(w->exec, &w->velocity, P) ||
        pfl_exec_alloc(w->exec, &w->aux_grads, P) || !(w->model = pfl_malloc(V * sizeof(float))) ||
        !(w->order = pfl_malloc(sizeof(int) * (size_t)largest_client(fl->part))) ||
        !(w->received = pfl_malloc(V * sizeof(float))) || !(w->start = pfl_malloc(V * sizeof(float))) ||
        !(w->aux = pfl_malloc(V * sizeof(float))) || !(w->own = pfl_calloc(V, sizeof(float)))) {
        worker_free(w);
        return -1;
    }
    return 0;
}

/* A device backend's refusal (backend.h): a worker's executor was asked for
 * work it cannot do (a step with host-side parts, host memory), and the run
 * stops with one line naming the method and what. */
static int device_refusal(const pfl_fl *fl) {
    for (int i = 0; i < fl->num_workers; i++) {
        const pfl_exec *x = fl->workers[i].exec;
        const char *why = x ? pfl_exec_refusal(x) : NULL;
        if (why) return pfl_err("--device %s: %s cannot run there (%s); run it with --device cpu", x->be->name,
                                fl->algo->name, why);
    }
    return 0;
}

/* ---- setup ---- */

static int check_config(const pfl_config *cfg, const pfl_model *model, const pfl_dataset *data,
                        const pfl_partition *part) {
    if (part->num_clients != cfg->clients)
        return pfl_err("partition has %d clients, config %d", part->num_clients, cfg->clients);
    if (model->in_c != data->c || model->in_h != data->h || model->in_w != data->w || model->classes != data->classes)
        return pfl_err("model %s was built for %dx%dx%d/%d classes, data %s is %dx%dx%d/%d classes", model->name,
                       model->in_c, model->in_h, model->in_w, model->classes, data->name, data->c, data->h, data->w,
                       data->classes);
    /* text (agnews): token ids mean something only to a model with an
     * embedding, and only once the vocabulary is built from the partition */
    const int vocab = pfl_model_vocab(model);
    if (data->text && !vocab) return pfl_err("data %s is text (token ids): use --model fasttext", data->name);
    if (!data->text && vocab) return pfl_err("model %s reads token ids: use a text dataset (agnews)", model->name);
    if (data->text && !data->text->vocab_size)
        return pfl_err("data %s: no vocabulary yet (pfl_text_build_vocab comes after the partition)", data->name);
    if (data->text && data->text->vocab_size > vocab)
        return pfl_err("data %s has %d token ids, model %s's embedding only %d rows", data->name,
                       data->text->vocab_size, model->name, vocab);
    if (cfg->threads < 1 || cfg->batch < 1 || cfg->eval_batch < 1 || cfg->rounds < 0 || cfg->epochs < 0 ||
        cfg->eval_every < 1 || !(cfg->join > 0.0 && cfg->join <= 1.0))
        return pfl_err("invalid configuration (threads, batch, rounds, epochs, eval-every or join out of range)");
    if (!(cfg->drop_rate >= 0.0 && cfg->drop_rate < 1.0))
        return pfl_err("--drop-rate %g: must be in [0, 1)", cfg->drop_rate);
    return 0;
}

int pfl_clients_per_round(const pfl_config *cfg) {
    int n = (int)lround(cfg->join * cfg->clients);
    return n < 1 ? 1 : (n > cfg->clients ? cfg->clients : n);
}

/* MPI: whether this process keeps and evaluates `client` (always
 * in-process). */
static bool owns(const pfl_fl *fl, int client) { return pfl_fl_at_home(fl, client); }

static bool is_stateful(const pfl_fl *fl) {
    return fl->algo->stateful || fl->cfg.modules.ala || fl->cfg.modules.flayer_agg ||
           fl->cfg.bn != PFL_BN_SHARED; /* BatchNorm kept local lives in the clients' models */
}

/* Per-client state exists only where something needs it: the client store
 * for stateful runs and ALA (pfl_fl_create_stores, after the method said
 * what it shares), accuracies with FLAYER's head mix, upload flags for the
 * round's upload slots with its mask. */
static int create_client_state(pfl_fl *fl) {
    const int N = fl->cfg.clients;
    const size_t P = fl->model->num_params;
    /* every row, the extra blocks' too: a block is shared unless its rule keeps it personal */
    const pfl_model *m = fl->model;
    if (!(fl->shared = pfl_malloc(sizeof(bool) * (size_t)pfl_model_rows(m)))) return -1;
    for (int l = 0; l < pfl_model_rows(m); l++) fl->shared[l] = !m->layers[l].personal;
    if (!(fl->local_acc = pfl_calloc((size_t)N, sizeof(float)))) return -1;
    if (!(fl->joins_next = pfl_calloc((size_t)N, sizeof(bool)))) return -1;
    if (fl->cfg.modules.flayer_mask) {
        const int slots = pfl_clients_per_round(&fl->cfg);
        if (!(fl->sent = pfl_calloc((size_t)slots, sizeof(uint8_t *)))) return -1;
        for (int k = 0; k < slots; k++)
            if (!(fl->sent[k] = pfl_malloc(P))) return -1;
    }
    return 0;
}

/* The local-init modules mix the top layers of what a client receives:
 * after the method marked the layers it never sends (FedPer's head), check
 * that some are left. */
static int check_modules(const pfl_fl *fl) {
    const pfl_modules_config *mod = &fl->cfg.modules;
    const int L = fl->model->num_layers, own = pfl_private_top_layers(fl);
    if (!mod->ala && !mod->flayer_agg) return 0;
    const char *flag = mod->ala ? "--ala" : "--flayer-agg";
    if (own >= L)
        return pfl_err("%s: %s sends a client none of %s's layers (each keeps all its own), so there is nothing to mix",
                       flag, fl->algo->name, fl->model->name);
    if (mod->ala && own > 0 && mod->ala_p > L - own)
        return pfl_err("--ala-p %d: %s sends a client only the lower %d of %s's %d layers (the top %d are its own); "
                       "ALA mixes the top --ala-p of those",
                       mod->ala_p, fl->algo->name, L - own, fl->model->name, L, own);
    return 0;
}

static void free_client_state(pfl_fl *fl) {
    pfl_fl_free_stores(fl);
    if (fl->sent)
        for (int k = 0; k < pfl_clients_per_round(&fl->cfg); k++) free(fl->sent[k]);
    free(fl->sent);
    free(fl->shared);
    free(fl->local_acc);
    free(fl->joins_next);
}

/* The run's model: the caller's, or a copy with the method's extra blocks. */
static int use_model(pfl_fl *fl, const pfl_model *model) {
    fl->model = model;
    if (!fl->algo->blocks) return 0;
    if (!(fl->own_model = pfl_malloc(sizeof *fl->own_model))) return -1;
    *fl->own_model = *model;
    fl->model = fl->own_model;
    return fl->algo->blocks(&fl->cfg, fl->own_model);
}

int pfl_fl_create(pfl_fl *fl, const pfl_config *cfg, const pfl_model *model, const pfl_dataset *data,
                  const pfl_partition *part, const pfl_algo *algo) {
    memset(fl, 0, sizeof *fl);
    if (check_config(cfg, model, data, part) || (algo->check && algo->check(cfg))) return -1;
    fl->cfg = *cfg;
    fl->model = model, fl->data = data, fl->part = part, fl->algo = algo;
    pfl_dataset_digest(data, fl->data_sha256);
    pfl_modules_config *mod = &fl->cfg.modules;
    mod->ala |= (algo->modules & PFL_MODULE_ALA) != 0;
    mod->flayer_agg |= (algo->modules & PFL_MODULE_FLAYER_AGG) != 0;
    mod->flayer_lr |= (algo->modules & PFL_MODULE_FLAYER_LR) != 0;
    mod->flayer_mask |= (algo->modules & PFL_MODULE_FLAYER_MASK) != 0;
    if (mod->ala && mod->flayer_agg)
        return pfl_err("--ala and --flayer-agg both initialize the local head; choose one");
    if (cfg->bn != PFL_BN_SHARED && model->num_state == 0)
        return pfl_err("--bn %s: model %s has no BatchNorm layers", cfg->bn == PFL_BN_LOCAL ? "local" : "stats-local",
                       model->name);
    if (mod->ala && mod->ala_p > model->num_layers)
        return pfl_err("--ala-p %d: %s has only %d layers", mod->ala_p, model->name, model->num_layers);
    if (mod->flayer_agg && cfg->algo.head_layers >= model->num_layers)
        return pfl_err("--head-layers %d: the head would be all %d layers of %s (use fewer)", cfg->algo.head_layers,
                       model->num_layers, model->name);
    /* Parallelism is across clients; BLAS inside a worker stays on one thread
     * so results do not depend on how many threads exist. */
    pfl_blas_single_thread();
    if (use_model(fl, model)) goto fail;
    model = fl->model; /* with the method's extra blocks */
    fl->global = pfl_malloc(pfl_model_vector_len(model) * sizeof(float));
    fl->num_workers = cfg->threads;
    fl->workers = pfl_calloc((size_t)fl->num_workers, sizeof *fl->workers);
    if (!fl->global || !fl->workers) goto fail;
    pfl_rng init = pfl_rng_stream(cfg->seed, PFL_RNG_NONE, PFL_RNG_NONE, PFL_RNG_INIT);
    pfl_model_init_params(model, fl->global, &init);
    for (int i = 0; i < fl->num_workers; i++)
        if (worker_init(&fl->workers[i], i, fl)) goto fail;
    if (create_client_state(fl)) goto fail;
    if (algo->create && algo->create(fl)) goto fail;
    pfl_bn_mark_local(fl); /* FedBN: after the algorithm marked its own layers */
    if (check_modules(fl) || pfl_fl_create_stores(fl, is_stateful(fl)) || pfl_fl_deal_homes(fl)) goto fail;
    /* nothing of a client outlives its round: any rank can train it */
    fl->clients_move = !fl->client_state && !fl->trained && fl->num_algo_stores == 0 && !algo->save;
    return 0;
fail:
    pfl_fl_destroy(fl);
    return -1;
}

void pfl_fl_destroy(pfl_fl *fl) {
    if (fl->algo && fl->algo->destroy && fl->algo_state) fl->algo->destroy(fl);
    free_client_state(fl);
    for (int i = 0; fl->workers && i < fl->num_workers; i++) worker_free(&fl->workers[i]);
    free(fl->workers);
    free(fl->global);
    free(fl->own_model);
    free(fl->client_acc);
    free(fl->home_first);
    free(fl->slot_first);
    pfl_fl_free_shards(fl);
    memset(fl, 0, sizeof *fl);
}

/* ---- the round's semantics: the flags' words ---- */

static const char *const eval_moment_words[] = {"after-init", "after-train"};
static const char *const init_clients_words[] = {"selected", "all"};
static const char *const step_budget_words[] = {"total", "each"};

const char *pfl_eval_moment_name(pfl_eval_moment m) { return eval_moment_words[m == PFL_EVAL_AFTER_TRAIN]; }
const char *pfl_init_clients_name(pfl_init_clients c) { return init_clients_words[c == PFL_INIT_ALL]; }
const char *pfl_step_budget_name(pfl_step_budget b) { return step_budget_words[b == PFL_BUDGET_EACH]; }

/* Which of two words `word` is (0 or 1), or -1 with a message naming the flag. */
static int parse_word(const char *flag, const char *word, const char *const words[2]) {
    for (int i = 0; i < 2; i++)
        if (!strcmp(word, words[i])) return i;
    return pfl_err("%s '%s': expected %s or %s", flag, word, words[0], words[1]);
}

int pfl_parse_semantics(pfl_config *cfg, const char *eval_moment, const char *init_clients, const char *step_budget) {
    int v;
    if (eval_moment) {
        if ((v = parse_word("--eval-moment", eval_moment, eval_moment_words)) < 0) return -1;
        cfg->eval_moment = v ? PFL_EVAL_AFTER_TRAIN : PFL_EVAL_AFTER_INIT;
    }
    if (init_clients) {
        if ((v = parse_word("--init-clients", init_clients, init_clients_words)) < 0) return -1;
        cfg->init_clients = v ? PFL_INIT_ALL : PFL_INIT_SELECTED;
    }
    if (step_budget) {
        if ((v = parse_word("--step-budget", step_budget, step_budget_words)) < 0) return -1;
        cfg->step_budget = v ? PFL_BUDGET_EACH : PFL_BUDGET_TOTAL;
    }
    return 0;
}

/* ---- selection ---- */

int pfl_select_clients(const pfl_config *cfg, int round, int *out) {
    const int n = pfl_clients_per_round(cfg);
    for (int c = 0; c < cfg->clients; c++) out[c] = c;
    if (n < cfg->clients) {
        /* A partial Fisher-Yates draws n distinct clients. */
        pfl_rng rng = pfl_rng_stream(cfg->seed, round, PFL_RNG_NONE, PFL_RNG_SELECT);
        for (int i = 0; i < n; i++) {
            int j = i + (int)pfl_rng_below(&rng, (uint64_t)(cfg->clients - i));
            int t = out[i];
            out[i] = out[j];
            out[j] = t;
        }
        /* ascending, so aggregation sums in client order */
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
                int t = out[j];
                out[j] = out[j - 1];
                out[j - 1] = t;
            }
    }
    return n;
}

int pfl_drop_clients(const pfl_config *cfg, int round, int *clients, int n, int *dropped, int *n_dropped) {
    int kept = 0;
    *n_dropped = 0;
    for (int k = 0; k < n; k++) {
        bool drops = false;
        if (cfg->drop_rate > 0.0) {
            pfl_rng rng = pfl_rng_stream(cfg->seed, round, clients[k], PFL_RNG_DROP);
            drops = pfl_rng_uniform(&rng) < cfg->drop_rate;
        }
        if (drops) dropped[(*n_dropped)++] = clients[k];
        else clients[kept++] = clients[k];
    }
    return kept;
}

/* ---- evaluation ---- */

static long count_correct(pfl_worker *w, const pfl_fl *fl, const float *params, const int *idx, int n,
                          bool personal) {
    int (*own)(const pfl_fl *, pfl_exec *, const float *) = personal ? fl->algo->personal_correct : NULL;
    pfl_exec *x = w->exec;
    pfl_xbuf p = pfl_exec_view_const(x, params, pfl_model_vector_len(fl->model));
    long correct = 0;
    const int eb = fl->cfg.eval_batch;
    for (int start = 0; start < n; start += eb) {
        int B = n - start < eb ? n - start : eb;
        pfl_exec_gather(x, idx + start, B);
        pfl_exec_forward(x, &p, false, NULL);
        correct += own ? own(fl, x, params) : pfl_exec_correct(x);
    }
    pfl_exec_unview(x, &p);
    return correct;
}

long pfl_count_correct_on(pfl_worker *w, const pfl_fl *fl, const float *params, const int *idx, int n) {
    return count_correct(w, fl, params, idx, n, false);
}

long pfl_count_correct_personal(pfl_worker *w, const pfl_fl *fl, const float *params, const int *idx, int n) {
    return count_correct(w, fl, params, idx, n, true);
}

/* The client's personalized model at the moment --eval-moment names: as its
 * latest training left it (after-train, once it has trained), else as it
 * holds it now, after the broadcast (the method's personal_model). */
static const float *personal_model_now(pfl_fl *fl, int client, float *scratch) {
    if (pfl_client_has_trained(fl, client))
        return pfl_store_read(fl->trained, client);
    return (fl->algo->personal_model ? fl->algo->personal_model : pfl_default_personal_model)(fl, client, scratch);
}

int pfl_fl_personal_digest(pfl_fl *fl, uint8_t digest[32]) {
    const int N = fl->cfg.clients;
    const size_t V = pfl_model_vector_len(fl->model), words = 32 / sizeof(long);
    long *sums = pfl_calloc((size_t)N * words, sizeof(long));
    if (!sums) return -1;
    /* Many clients hold the same model (FedAvg's all hold the global one; the
     * clients never selected in a large federation all hold what the method
     * sends now under the initial personal parts): a model equal, byte for
     * byte, to the one hashed last reuses its hash. Comparing is many times
     * faster than hashing, which at 10,000 clients of 2.3 MB took minutes. */
    float *last = fl->workers[0].aux;
    uint8_t one[32];
    bool have_last = false;
    for (int c = 0; c < N; c++) {
        if (!owns(fl, c)) continue; /* MPI: its owner hashes it; the others add zeros */
        const float *model = personal_model_now(fl, c, fl->workers[0].model);
        if (!have_last || memcmp(model, last, V * sizeof(float)) != 0) {
            pfl_sha256 s;
            pfl_sha256_init(&s);
            pfl_sha256_update(&s, model, V * sizeof(float));
            pfl_sha256_final(&s, one);
            memcpy(last, model, V * sizeof(float));
            have_last = true;
        }
        pfl_fl_release_client(fl, c);
        memcpy(sums + (size_t)c * words, one, 32);
    }
    int rc = pfl_transport_sum_longs(fl->cfg.transport, sums, (size_t)N * words); /* not a round's payload */
    if (rc == 0) {
        pfl_sha256 s;
        pfl_sha256_init(&s);
        pfl_sha256_update(&s, sums, (size_t)N * 32);
        pfl_sha256_final(&s, digest);
    }
    free(sums);
    return rc;
}

int pfl_fl_evaluate(pfl_fl *fl, pfl_round_metrics *m) {
    const int N = fl->cfg.clients;
    const pfl_algo *algo = fl->algo;
    long *local_correct = pfl_calloc((size_t)N, sizeof(long));
    long *global_correct = pfl_calloc((size_t)N, sizeof(long));
    if (!fl->client_acc) fl->client_acc = pfl_malloc(sizeof(double) * (size_t)N);
    if (!local_correct || !global_correct || !fl->client_acc) {
        free(local_correct);
        free(global_correct);
        return -1;
    }
    const bool eval_global = algo->has_global;
    const bool eval_personal = fl->client_state || algo->personal_model || fl->trained || !eval_global;
#pragma omp parallel for schedule(dynamic, 1) num_threads(fl->num_workers)
    for (int c = 0; c < N; c++) {
        if (!owns(fl, c)) continue; /* MPI: its owner counts it */
        pfl_worker *w = &fl->workers[omp_get_thread_num()];
        const pfl_client_data *cd = &fl->part->clients[c];
        if (eval_global) global_correct[c] = pfl_count_correct_on(w, fl, fl->global, cd->test, cd->n_test);
        if (eval_personal) {
            const float *personal = personal_model_now(fl, c, w->model);
            local_correct[c] = pfl_count_correct_personal(w, fl, personal, cd->test, cd->n_test);
            pfl_fl_release_client(fl, c);
        } else {
            local_correct[c] = global_correct[c];
        }
    }
    /* MPI: every process gets every client's counts (integers: exact) */
    pfl_transport *t = fl->cfg.transport;
    if (t) t->tally = PFL_TALLY_EVAL;
    const int rc = pfl_transport_wait_all(t) || pfl_transport_sum_longs(t, local_correct, (size_t)N) ||
                   pfl_transport_sum_longs(t, global_correct, (size_t)N);
    if (t) t->tally = PFL_TALLY_OTHER;
    if (rc) {
        free(local_correct);
        free(global_correct);
        return -1;
    }
    long sum_correct = 0, sum_global = 0, sum_test = 0, joined_correct = 0, joined_test = 0;
    double sum_acc = 0.0, sum_acc2 = 0.0;
    int counted = 0;
    for (int c = 0; c < N; c++) {
        const int n_test = fl->part->clients[c].n_test;
        sum_correct += local_correct[c];
        sum_global += global_correct[c];
        sum_test += n_test;
        if (fl->joins_next[c]) joined_correct += local_correct[c], joined_test += n_test;
        fl->client_acc[c] = NAN;
        if (n_test > 0) {
            double acc = (double)local_correct[c] / n_test;
            sum_acc += acc, sum_acc2 += acc * acc, counted++;
            fl->client_acc[c] = acc;
        }
    }
    m->client_acc = fl->client_acc;
    free(local_correct);
    free(global_correct);
    m->local_acc = sum_test ? (double)sum_correct / (double)sum_test : NAN;
    m->local_acc_joined = joined_test ? (double)joined_correct / (double)joined_test : NAN;
    m->global_acc = eval_global && sum_test ? (double)sum_global / (double)sum_test : NAN;
    m->local_acc_mean = counted ? sum_acc / counted : NAN;
    double var = counted ? sum_acc2 / counted - m->local_acc_mean * m->local_acc_mean : NAN;
    m->local_acc_std = counted ? sqrt(var > 0.0 ? var : 0.0) : NAN;
    return 0;
}

/* ---- stopping on a signal ---- */

static volatile sig_atomic_t caught_signal; /* the signal this process received, or 0 */
static bool catching;
static int stopped_by;

static void on_stop_signal(int sig) { caught_signal = sig; }

void pfl_fl_catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND; /* a second signal kills as usual */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    catching = true;
}

int pfl_fl_stopped_by(void) { return stopped_by; }

/* After a round: whether any rank got a stop signal (a collective when
 * signals are caught, which every rank's flags say alike). */
static int vote_stop(pfl_fl *fl) {
    if (!catching) return 0;
    return pfl_transport_max_int(fl->cfg.transport, (int)caught_signal, &fl->stop_signal);
}

/* ---- the round loop ---- */

/* This rank's slots of the round, biggest client first, so parallel
 * workers finish together; the order of work does not affect results.
 * Returns how many. */
static int order_by_work(const pfl_fl *fl, const int *selected, int *order) {
    int first, end;
    pfl_fl_my_slots(fl, &first, &end);
    const pfl_partition *part = fl->part;
    for (int k = first; k < end; k++) order[k - first] = k;
    for (int i = 1; i < end - first; i++)
        for (int j = i; j > 0 && part->clients[selected[order[j - 1]]].n_train < part->clients[selected[order[j]]].n_train;
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return end - first;
}

/* One selected client's round: init, train, remember its accuracy, upload
 * (masked when the module is on), keep its state; and what the server
 * learns of it besides the upload. */
static void run_client(pfl_fl *fl, pfl_worker *w, int client, int slot, float *upload, pfl_slot_record *record) {
    const pfl_algo *algo = fl->algo;
    const size_t V = pfl_model_vector_len(fl->model);
    pfl_train_stats *stats = &record->stats;
    (algo->local_init ? algo->local_init : pfl_default_local_init)(fl, client, w->model);
    if (fl->sent) memcpy(w->start, w->model, V * sizeof(float));
    (algo->local_train ? algo->local_train : pfl_default_local_train)(fl, client, w, w->model, stats);
    if (stats->last_epoch_samples > 0)
        fl->local_acc[client] = (float)stats->last_epoch_correct / (float)stats->last_epoch_samples;
    (algo->upload ? algo->upload : pfl_default_upload)(fl, client, w->model, upload);
    if (fl->sent) pfl_flayer_mask(fl->sent[slot], fl->model, w->model, w->start, w->aux);
    pfl_fl_keep_trained(fl, client, w); /* the client's state; --eval-moment after-train: the trained model */
    (algo->message_bytes ? algo->message_bytes : pfl_default_message_bytes)(fl, client, fl->sent ? fl->sent[slot] : NULL,
                                                                            upload, &record->down, &record->up);
}

static void train_clients(pfl_fl *fl, const int *selected, const int *order, int mine, float *const *uploads,
                          pfl_slot_record *records) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(fl->num_workers)
    for (int i = 0; i < mine; i++) {
        pfl_worker *w = &fl->workers[omp_get_thread_num()];
        const int slot = order[i];
        run_client(fl, w, selected[slot], slot, uploads[slot], &records[slot]);
    }
}

/* After round fl->round's aggregation (and before round 1): every client
 * receives what the method sends it (PFLlib sends to all clients, and
 * evaluates them, before each round's training). With a local-init module
 * (--ala, --flayer-agg) and --init-clients selected, only the clients of the
 * next round do, as FedALA's and FLAYER's Algorithm 1 have it ("Server sends
 * Theta^{t-1} to |I^t| clients"); the others keep the model they have. */
static int broadcast(pfl_fl *fl) {
    const int N = fl->cfg.clients;
    int *next = pfl_malloc(sizeof(int) * (size_t)N);
    if (!next) return -1;
    memset(fl->joins_next, 0, sizeof(bool) * (size_t)N);
    const int n = pfl_select_clients(&fl->cfg, fl->round + 1, next);
    for (int k = 0; k < n; k++) fl->joins_next[next[k]] = true;
    free(next);
    if (!fl->client_state) return 0;
    const pfl_modules_config *mod = &fl->cfg.modules;
    const bool selected_only = (mod->ala || mod->flayer_agg) && fl->cfg.init_clients == PFL_INIT_SELECTED;
#pragma omp parallel for schedule(dynamic, 1) num_threads(fl->num_workers)
    for (int c = 0; c < N; c++)
        if (owns(fl, c) && (!selected_only || fl->joins_next[c])) pfl_fl_receive(fl, c, &fl->workers[omp_get_thread_num()]);
    return pfl_fl_store_failed(fl);
}

/* The round's training figures from every slot's record, in slot order
 * (under MPI on rank 0, which received them all; the other ranks report
 * nothing): the metrics' loss, samples and message bytes, and each client's
 * last-epoch accuracy for the checkpoint. */
static void round_figures(pfl_fl *fl, const int *selected, int n, const pfl_slot_record *all, pfl_round_metrics *m) {
    const pfl_transport *t = fl->cfg.transport;
    double loss_sum = 0.0;
    m->train_samples = 0, m->bytes_down = m->bytes_up = 0;
    if (!pfl_transport_distributed(t) || t->rank == 0)
        for (int k = 0; k < n; k++) {
            const pfl_train_stats *st = &all[k].stats;
            loss_sum += st->loss_sum, m->train_samples += st->samples;
            m->bytes_down += all[k].down, m->bytes_up += all[k].up;
            if (st->last_epoch_samples > 0)
                fl->local_acc[selected[k]] = (float)st->last_epoch_correct / (float)st->last_epoch_samples;
        }
    m->train_loss = m->train_samples ? loss_sum / (double)m->train_samples : NAN;
}

/* The round's buffers: the uploads this rank holds (a whole model vector
 * each) and what the exchange needs. */
typedef struct {
    int *selected, *dropped, *order;
    pfl_slot_record *records, *all;
    float **uploads;      /* per slot: its upload, NULL where it is not on this rank */
    float *storage;       /* room for `room` uploads */
    size_t room;
} round_buffers;

static void round_buffers_free(round_buffers *b) {
    free(b->selected), free(b->dropped), free(b->order), free(b->records), free(b->all);
    free(b->uploads), free(b->storage);
}

static int round_buffers_init(round_buffers *b, const pfl_fl *fl) {
    const size_t N = (size_t)fl->cfg.clients;
    memset(b, 0, sizeof *b);
    /* every round selects the same number of clients */
    const size_t slots = (size_t)pfl_clients_per_round(&fl->cfg);
    if (!(b->selected = pfl_malloc(sizeof(int) * N)) || !(b->dropped = pfl_malloc(sizeof(int) * N)) ||
        !(b->order = pfl_malloc(sizeof(int) * N)) || !(b->records = pfl_malloc(sizeof *b->records * slots)) ||
        !(b->all = pfl_malloc(sizeof *b->all * slots)) || !(b->uploads = pfl_calloc(slots, sizeof(float *)))) {
        round_buffers_free(b);
        return -1;
    }
    return 0;
}

/* The uploads of the round's n slots that this rank holds: every one in
 * one process and for a gather (all travel to every rank), its own slots
 * in a reduction (so memory does not grow with the round's clients). */
static int place_uploads(pfl_fl *fl, round_buffers *b, int n) {
    const size_t V = pfl_model_vector_len(fl->model);
    int first = 0, end = n;
    if (pfl_transport_distributed(fl->cfg.transport) && !fl->algo->whole_uploads) pfl_fl_my_slots(fl, &first, &end);
    if ((size_t)(end - first) > b->room) {
        float *more = pfl_malloc(sizeof(float) * V * (size_t)(end - first));
        if (!more) return -1;
        free(b->storage);
        b->storage = more, b->room = (size_t)(end - first);
    }
    for (int k = 0; k < n; k++) b->uploads[k] = k >= first && k < end ? b->storage + V * (size_t)(k - first) : NULL;
    return 0;
}

/* After a round's metrics: the callback, the stop vote, the after-round
 * hook (which writes the checkpoint, on a stop too). Returns -1 on failure,
 * 1 to stop, 0 to go on. */
static int end_round(pfl_fl *fl, pfl_round_metrics *m, pfl_round_callback cb, pfl_after_round after, void *ctx) {
    if (cb) cb(m, fl, ctx);
    if (vote_stop(fl)) return -1;
    int next = after ? after(fl, ctx) : 0;
    if (next < 0) return -1;
    /* MPI: rank 0's answer holds for every rank (it alone read back the evaluations before a resume) */
    if (after && pfl_transport_share(fl->cfg.transport, &next, sizeof next, 0)) return -1;
    if (fl->stop_signal && fl->round < fl->cfg.rounds) stopped_by = fl->stop_signal;
    return next > 0 || fl->stop_signal ? 1 : 0;
}

/* Round r: select, deal, train, exchange, aggregate, broadcast; fills m
 * with the training figures. 0 or -1. */
static int train_round(pfl_fl *fl, int r, round_buffers *b, pfl_round_metrics *m) {
    int n = pfl_select_clients(&fl->cfg, r, b->selected), n_dropped;
    /* --drop-rate: the dropped clients' work is lost; the round goes on with
     * the others. Every rank drops the same clients (a pure function of
     * seed, round and client), so the exchange runs over the arrived ones. */
    n = pfl_drop_clients(&fl->cfg, r, b->selected, n, b->dropped, &n_dropped);
    if (pfl_fl_deal_round(fl, b->selected, n) || place_uploads(fl, b, n)) return -1;
    memset(b->records, 0, sizeof *b->records * (size_t)n);
    train_clients(fl, b->selected, b->order, order_by_work(fl, b->selected, b->order), b->uploads, b->records);
    if (pfl_fl_store_failed(fl) || /* a client's state found no room */
        device_refusal(fl) || pfl_round_exchange(fl, n, b->uploads, b->records, b->all))
        return -1;
    /* no upload arrived: the global model stays as it is */
    if (n > 0 && pfl_round_aggregate(fl, b->selected, n, b->uploads)) return -1;
    if (pfl_fl_store_failed(fl) || broadcast(fl)) return -1;
    round_figures(fl, b->selected, n, b->all, m);
    fl->bytes_down += m->bytes_down, fl->bytes_up += m->bytes_up;
    fl->train_samples += m->train_samples;
    m->round = r, m->selected = n, m->dropped = n_dropped, m->dropped_clients = b->dropped;
    fl->rounds_run++;
    return 0;
}

int pfl_fl_run(pfl_fl *fl, pfl_round_callback cb, void *ctx) { return pfl_fl_run_with(fl, cb, NULL, ctx); }

int pfl_fl_run_with(pfl_fl *fl, pfl_round_callback cb, pfl_after_round after, void *ctx) {
    round_buffers b;
    if (round_buffers_init(&b, fl)) return -1;
    int rc = -1, next = 0;
    pfl_round_metrics m = {0};
    fl->stop_signal = 0;
    if (!fl->resumed) { /* a fresh run; after pfl_fl_load, rounds 1..fl->round are done */
        fl->round = 0, fl->train_seconds = 0.0, fl->train_samples = 0;
        double t0 = now_seconds();
        if (broadcast(fl) || pfl_fl_evaluate(fl, &m) || device_refusal(fl)) goto done;
        if (fl->cfg.rounds == 0 && (pfl_fl_personal_digest(fl, fl->personal_sha256) || pfl_fl_sum_ala_start(fl)))
            goto done;
        m.round = 0, m.train_loss = NAN, m.eval_seconds = now_seconds() - t0, m.evaluated = true;
        if ((next = end_round(fl, &m, cb, after, ctx)) < 0) goto done;
    }
    for (int r = fl->round + 1; r <= fl->cfg.rounds && next == 0; r++) {
        fl->round = r;
        const double start = now_seconds();
        memset(&m, 0, sizeof m);
        if (train_round(fl, r, &b, &m)) goto done;
        const double trained = now_seconds();
        fl->train_seconds += trained - start;
        m.seconds = trained - start;
        if (r % fl->cfg.eval_every != 0 && r != fl->cfg.rounds) {
            /* not evaluated: report the round's training so progress shows */
            m.local_acc = m.local_acc_mean = m.local_acc_std = m.local_acc_joined = m.global_acc = NAN;
        } else {
            pfl_round_metrics training = m;
            if (pfl_fl_evaluate(fl, &m) || device_refusal(fl)) goto done;
            if (r == fl->cfg.rounds && (pfl_fl_personal_digest(fl, fl->personal_sha256) || pfl_fl_sum_ala_start(fl)))
                goto done;
            /* the evaluation's accuracies with the round's training figures */
            m.round = r, m.train_loss = training.train_loss, m.train_samples = training.train_samples;
            m.selected = training.selected, m.bytes_down = training.bytes_down, m.bytes_up = training.bytes_up;
            m.dropped = training.dropped, m.dropped_clients = training.dropped_clients;
            m.seconds = training.seconds, m.eval_seconds = now_seconds() - trained, m.evaluated = true;
        }
        if ((next = end_round(fl, &m, cb, after, ctx)) < 0) goto done;
    }
    rc = 0;
done:
    round_buffers_free(&b);
    return rc;
}
