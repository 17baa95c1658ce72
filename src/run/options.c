/* The flags of a run (run.h): the common table, and parsing argv against
 * the tables of the run's method and modules. */
#include <math.h>
#include <stdio.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "backend/backend.h"
#include "nn/layer_units.h"
#include "nn/model.h"
#include "run/run.h"
#include "util/err.h"

#define RUN_PARAM(TYPE, FLAG, FIELD)                                                                           \
    .name = FLAG, .type = PFL_PARAM_##TYPE, .block = PFL_BLOCK_RUN, .offset = offsetof(pfl_run_options, FIELD)
#define NO_MAX 1e18

const pfl_param pfl_run_params[] = {
    {RUN_PARAM(STRING, "algo", algo), .alias = "algo", .def_text = "fedavg", .metavar = "NAME",
     .help = "method (the list below)"},
    {RUN_PARAM(STRING, "data", data), .alias = "data", .def_text = "mnist", .metavar = "NAME",
     .help = "dataset: mnist, fmnist, cifar10, cifar100, cifar100-coarse, svhn, tinyimagenet, agnews, or "
             "pfllib:DIR (a folder PFLlib's generators wrote, dataset/<NAME>: its clients as its files hold them)"},
    {RUN_PARAM(STRING, "model", model), .alias = "m", .def_text = "cnn", .metavar = "NAME",
     .help = "model: cnn, dnn, mlp, mnist-cnn, cifar-cnn, tsdp-cnn, resnet18, resnet18-cifar, alexnet, "
             "fasttext[:VOCAB[:DIM]] (pfl model --model NAME prints its layers)"},
    {RUN_PARAM(STRING, "partition", partition), .def_text = "pat", .metavar = "P",
     .help = "iid | pat[:K] | dir[:A[:MIN]] | onelabel[:TRAIN/TEST] | shards[:K] | dirc[:A] | cfr[:K] (see README); "
             "pfllib, the only one for --data pfllib:DIR and its default"},
    {RUN_PARAM(INT, "clients", cfg.clients), .alias = "nc", .def = 20, .min = 1, .max = 1e7, .metavar = "N",
     .help = "number of clients (with --data pfllib:DIR, default: the folder's own, num_clients of its config.json)"},
    {RUN_PARAM(DOUBLE, "join", cfg.join), .alias = "jr", .def = 1.0, .min = 0, .max = 1, .min_exclusive = true,
     .metavar = "F", .help = "fraction of clients per round, in (0, 1]"},
    {RUN_PARAM(INT, "rounds", cfg.rounds), .alias = "gr", .def = 100, .max = 1e7, .metavar = "R",
     .help = "global rounds"},
    {RUN_PARAM(INT, "epochs", cfg.epochs), .alias = "ls", .def = 1, .min = 1, .max = 1e5, .metavar = "E",
     .help = "local epochs per round"},
    {RUN_PARAM(INT, "batch", cfg.batch), .alias = "lbs", .def = 10, .min = 1, .max = 1e5, .metavar = "B",
     .help = "local batch size"},
    {RUN_PARAM(FLOAT, "lr", cfg.lr), .alias = "lr", .def = 0.005, .min = 0, .max = 1e3, .min_exclusive = true,
     .metavar = "F", .help = "local learning rate (> 0)"},
    {RUN_PARAM(FLOAT, "momentum", cfg.momentum), .max = 0.999, .metavar = "F", .help = "SGD momentum"},
    {RUN_PARAM(FLOAT, "weight-decay", cfg.weight_decay), .max = 1e3, .metavar = "F", .help = "SGD weight decay (L2)"},
    {RUN_PARAM(U64, "seed", cfg.seed), .def = 1, .max = 9007199254740992.0, .metavar = "S",
     .help = "seed of every random stream"},
    {RUN_PARAM(STRING, "seeds", seeds), .metavar = "LIST",
     .help = "run once per seed (a list and ranges: 1,2,3 or 1-5) into --out DIR/seed-N, each as --seed N would, "
             "and write DIR/summary.json with the mean and std over seeds"},
    {RUN_PARAM(INT, "threads", cfg.threads), .min = 1, .max = 4096, .metavar = "T",
     .help = "worker threads, clients trained in parallel; the default is the number of cores (under mpirun, "
             "divided among the processes on the machine)"},
    {RUN_PARAM(INT, "eval-every", cfg.eval_every), .alias = "eg", .def = 1, .min = 1, .max = 1e7, .metavar = "K",
     .help = "evaluate every K rounds (and after the last)"},
    {RUN_PARAM(INT, "eval-batch", cfg.eval_batch), .def = 100, .min = 1, .max = 1e5, .metavar = "B",
     .help = "batch size for evaluation only"},
    /* the round's semantics: words parsed by pfl_parse_semantics, docs/evaluation.md */
    {RUN_PARAM(STRING, "eval-moment", eval_moment), .def_text = "after-init", .metavar = "WHEN",
     .help = "personalized model evaluated: after-init (as each client holds it after the server's message and "
             "local initialization, before training) | after-train (as its latest training left it)"},
    {RUN_PARAM(STRING, "init-clients", init_clients), .def_text = "selected", .metavar = "WHO",
     .help = "clients --ala/--flayer-agg initialize at a broadcast: selected (the next round's, the papers' "
             "Algorithm 1) | all (every client, their reference code)"},
    {RUN_PARAM(STRING, "step-budget", step_budget), .def_text = "total", .metavar = "HOW",
     .help = "--local-steps K for methods that train twice (ditto, fedrep): total (epochs x K batches a round in "
             "all, divided by their epoch ratio) | each (every epoch of either is K batches)"},
    {RUN_PARAM(STRING, "bn", bn), .def_text = "auto", .metavar = "MODE",
     .help = "BatchNorm layers (resnet18*): shared (averaged, running statistics too) | local (FedBN: weight, "
             "bias and statistics stay with each client) | stats-local (running statistics stay, as PFLlib) | auto "
             "(stats-local on a model with BatchNorm, as PFLlib, the reference code of FedALA's and FLAYER's "
             "tables; shared for the methods whose paper or training says otherwise: fedtsdp, pfedme, cfl, fedalp)"},
    {RUN_PARAM(STRING, "layer-unit", layer_unit), .def_text = "rows", .metavar = "UNIT",
     .help = "what a count given to --ala-p, --head-layers, --cfr-layers, --tsdp-shared-layers counts: rows (pfl's "
             "layer table: a conv, a BatchNorm, a Linear) | tensors (PyTorch's parameters(): pFedCFR's layers) | "
             "blocks (a ResNet stage, the stem with its BatchNorm: FedALA's); pfl model --model M lists each; "
             "those flags take names too (fc, layer4.*)"},
    {RUN_PARAM(STRING, "data-dir", data_dir), .metavar = "DIR", .help = "data directory (env PFL_DATA)"},
    {RUN_PARAM(STRING, "out", out), .metavar = "DIR", .help = "write metrics.jsonl and summary.json here"},
    {RUN_PARAM(BOOL, "overwrite", overwrite),
     .help = "--out DIR may hold another run: remove that run's files (summary.json, metrics.jsonl, checkpoint, "
             "seed-N/) once the new run has loaded its data and built its federation; without it such a folder is "
             "refused"},
    {RUN_PARAM(BOOL, "quiet", quiet), .help = "no progress lines"},
    {RUN_PARAM(STRING, "device", device), .def_text = "cpu", .metavar = "cpu|cuda",
     .help = "where clients train and are evaluated: cpu, or cuda (the first NVIDIA GPU; in a pfl built with nvcc "
             "present; a method whose local work runs on host memory is refused there)"},
    {RUN_PARAM(BOOL, "tf32", tf32),
     .help = "--device cuda: float32 matrix products on TF32 tensor cores (faster, about 3 decimal digits; off: "
             "within float32 rounding of the CPU)"},
    {PFL_ALGO_PARAM(INT, "local-steps", local_steps), .max = 1e7, .metavar = "K",
     .help = "a local epoch is K batches (reshuffled after each pass) instead of one pass, every algorithm "
             "(0: a pass; pFedCFR paper: 10)"},
    {RUN_PARAM(DOUBLE, "train-fraction", train_fraction), .def = 0.75, .min = 0, .max = 1, .min_exclusive = true,
     .metavar = "F", .help = "share of each client's samples for training, the rest its test split (FedTSDP paper: 0.8)"},
    {RUN_PARAM(FLOAT, "lr-decay", cfg.lr_decay), .def = 1.0, .min = 0, .max = 10, .min_exclusive = true,
     .metavar = "F", .help = "round r trains at lr * F^(r-1), every algorithm (1: none; FedTSDP paper: 0.95)"},
    {RUN_PARAM(STRING, "public", public_set), .metavar = "N|test",
     .help = "hold the dataset's last N samples out of every client as the server's unlabeled public set; test = "
             "the original test files (10000; svhn 26032); fedtsdp's default is test, the others' 0"},
    {RUN_PARAM(BOOL, "auto-break", auto_break), .alias = "ab",
     .help = "stop early once the best personalized accuracy (local_acc, round 0 included) lies more than "
             "--top-cnt evaluations back (PFLlib's -ab, which takes a value there: True); summary.json says so"},
    {RUN_PARAM(INT, "top-cnt", top_cnt), .alias = "tc", .def = 100, .min = 1, .max = 1e7, .metavar = "K",
     .help = "--auto-break: evaluations without a better accuracy before stopping (PFLlib's -tc)"},
    {RUN_PARAM(INT, "checkpoint-every", checkpoint_every), .max = 1e7, .metavar = "K",
     .help = "write --out DIR/checkpoint after every K-th round and the last (0: never); pfl resume DIR goes on from it; "
             "a SIGTERM or SIGINT then ends the round under way with its checkpoint (exit 128 + the signal)"},
    {RUN_PARAM(DOUBLE, "drop-rate", cfg.drop_rate), .max = 1, .metavar = "F",
     .help = "each selected client drops out with probability F, in [0, 1); the server aggregates what arrived"},
    {RUN_PARAM(BOOL, "allow-divergence", allow_divergence),
     .help = "a round whose training loss or global model is not finite (NaN, inf) ends the run (summary.json says "
             "\"diverged_round\", exit 2) unless this is given: then it runs to its last round, still saying where it "
             "diverged"},
    {RUN_PARAM(INT, "stop-after", stop_after), .max = 1e7, .metavar = "R",
     .help = "tests: stop after round R as a crash would (no summary; 0: never)"},
    {RUN_PARAM(STRING, "client-state", cfg.client_state_dir), .metavar = "DIR",
     .help = "keep the clients' state (what each keeps between rounds, e.g. Ditto's personal models) in a "
             "memory-mapped file in DIR that the system pages in and out, not in memory: for runs whose client "
             "state does not fit (the file is unlinked at once and goes with the run)"},
};
const int pfl_run_num_params = (int)(sizeof pfl_run_params / sizeof pfl_run_params[0]);

/* Input shapes of the datasets pfl knows, so that a model can be built
 * before (or without) loading the data. */
static const struct {
    const char *name;
    int c, h, w, classes;
} known_shapes[] = {
    {"mnist", 1, 28, 28, 10},     {"fmnist", 1, 28, 28, 10},       {"cifar10", 3, 32, 32, 10},
    {"cifar100", 3, 32, 32, 100}, {"cifar100-coarse", 3, 32, 32, 20}, {"svhn", 3, 32, 32, 10},
    {"tinyimagenet", 3, 64, 64, 200}, {"agnews", 1, 1, PFL_TEXT_MAX_LEN, 4}, /* token ids */
};

int pfl_run_known_shape(const char *data, int *c, int *h, int *w, int *classes) {
    for (size_t i = 0; i < sizeof known_shapes / sizeof known_shapes[0]; i++)
        if (!strcmp(known_shapes[i].name, data)) {
            *c = known_shapes[i].c, *h = known_shapes[i].h, *w = known_shapes[i].w;
            *classes = known_shapes[i].classes;
            return 0;
        }
    return -1;
}

const char *pfl_default_data_dir(void) {
    const char *env = getenv("PFL_DATA");
    return env && *env ? env : "./data";
}

/* MPI: the cores, divided among the processes mpirun started on this
 * machine (Open MPI's, then MPICH's count of local ranks). */
static int default_threads(void) {
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!local || !*local) local = getenv("MPI_LOCALNRANKS");
    const int procs = omp_get_num_procs(), ranks = local && *local ? atoi(local) : 1;
    return ranks > 1 ? (procs / ranks > 0 ? procs / ranks : 1) : procs;
}

pfl_param_blocks pfl_run_blocks(const pfl_run_options *o) {
    pfl_param_blocks b = {{NULL}, NULL};
    pfl_run_options *w = (pfl_run_options *)o; /* the caller writes through them only when o is its own */
    b.at[PFL_BLOCK_ALGO] = &w->cfg.algo;
    b.at[PFL_BLOCK_MODULES] = &w->cfg.modules;
    b.at[PFL_BLOCK_EXTRA] = &w->cfg.extra;
    b.at[PFL_BLOCK_RUN] = w;
    b.layer_specs = &w->layer_specs;
    return b;
}

static const pfl_param *find_in(const pfl_param *table, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(table[i].name, name)) return &table[i];
    return NULL;
}

static const pfl_param *common_param(const char *name) { return find_in(pfl_run_params, pfl_run_num_params, name); }

int pfl_run_options_init(pfl_run_options *o, const pfl_algo *algo) {
    memset(o, 0, sizeof *o);
    pfl_param_blocks b = pfl_run_blocks(o);
    for (int i = 0; i < pfl_run_num_params; i++)
        if (pfl_param_reset(&pfl_run_params[i], &b)) return -1;
    o->algo = algo->name;
    o->cfg.threads = default_threads(); /* MPI: shared among local ranks */
    o->data_dir = pfl_default_data_dir();
    for (int k = 0; pfl_modules[k]; k++)
        for (int i = 0; i < pfl_modules[k]->num_params; i++)
            if (pfl_param_reset(&pfl_modules[k]->params[i], &b)) return -1;
    for (int i = 0; i < algo->num_params; i++) {
        const pfl_param *p = &algo->params[i];
        if (common_param(p->name))
            return pfl_err("method %s declares --%s, a flag every run has", algo->name, p->name);
        if (pfl_param_reset(p, &b)) return -1;
    }
    for (const char *const *d = algo->run_defaults; d && d[0]; d += 2) {
        const pfl_param *p = common_param(d[0]);
        if (!p || !d[1]) return pfl_err("method %s: run default '%s' is not a flag every run has", algo->name, d[0]);
        if (pfl_param_parse(p, &b, d[1])) return -1;
    }
    return 0;
}

const pfl_algo *pfl_run_algo(const pfl_run_options *o) { return pfl_algo_find(o->algo); }

bool pfl_run_module_on(const pfl_run_options *o, const pfl_module *m) {
    const pfl_algo *algo = pfl_algo_find(o->algo);
    return pfl_module_on(m, &o->cfg.modules, algo ? algo->modules : 0);
}

/* The --algo of argv (the last one given), or NULL when none is. */
static const char *algo_of(int argc, char **argv) {
    const char *name = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--algo") || !strcmp(a, "-algo")) {
            if (i + 1 < argc) name = argv[++i];
        } else if (!strncmp(a, "--algo=", 7) || !strncmp(a, "-algo=", 6)) {
            name = strchr(a, '=') + 1;
        }
    }
    return name;
}

/* Which flag `arg` spells ("--name", "--name=value", PFLlib's "-alias" or
 * "-name"), among table[0..n): its entry, or NULL. */
static const pfl_param *match(const pfl_param *table, int n, const char *arg) {
    if (arg[0] != '-') return NULL;
    const bool is_long = arg[1] == '-';
    const char *name = arg + (is_long ? 2 : 1);
    const size_t len = strcspn(name, "=");
    for (int i = 0; i < n; i++) {
        const char *candidate = is_long ? table[i].name : table[i].alias;
        if (candidate && strlen(candidate) == len && !strncmp(candidate, name, len)) return &table[i];
        if (!is_long && strlen(table[i].name) == len && !strncmp(table[i].name, name, len)) return &table[i];
    }
    return NULL;
}

/* Where a flag of this run is declared: the method's table first (its
 * defaults are the ones that hold), then the common one, then a module's
 * (*module set, switch or not). */
static const pfl_param *run_flag(const pfl_algo *algo, const char *arg, const pfl_module **module) {
    *module = NULL;
    const pfl_param *p = match(algo->params, algo->num_params, arg);
    if (!p) p = match(pfl_run_params, pfl_run_num_params, arg);
    for (int k = 0; !p && pfl_modules[k]; k++)
        if ((p = match(pfl_modules[k]->params, pfl_modules[k]->num_params, arg))) *module = pfl_modules[k];
    return p;
}

const pfl_param *pfl_run_param_named(const pfl_algo *algo, const char *name, const pfl_module **module) {
    char arg[128];
    if (snprintf(arg, sizeof arg, "--%s", name) >= (int)sizeof arg) return NULL;
    const pfl_module *m;
    const pfl_param *p = run_flag(algo, arg, &m);
    if (module) *module = m;
    return p;
}

bool pfl_run_args_give(const pfl_algo *algo, int argc, char **argv, const char *name) {
    for (int i = 0; i < argc; i++) {
        const pfl_module *m;
        const pfl_param *p = run_flag(algo, argv[i], &m);
        if (!p) continue;
        if (!strcmp(p->name, name)) return true;
        if (p->type != PFL_PARAM_BOOL && !strchr(argv[i], '=')) i++; /* its value */
    }
    return false;
}

/* "fedprox, pfedcfr": the methods whose tables declare the flag `arg`, or
 * "" when none does. */
static void methods_taking(const char *arg, char *buf, size_t size, const pfl_param **any) {
    buf[0] = '\0';
    *any = NULL;
    for (int i = 0; i < pfl_algo_count(); i++) {
        const pfl_algo *a = pfl_algo_at(i);
        const pfl_param *p = match(a->params, a->num_params, arg);
        if (!p) continue;
        *any = p;
        const size_t len = strlen(buf);
        snprintf(buf + len, size - len, "%s%s", len ? ", " : "", a->name);
    }
}

/* The name of a flag as given, without its value: "--mu" of "--mu=0.1". */
static void flag_text(const char *arg, char *buf, size_t size) {
    snprintf(buf, size, "%.*s", (int)strcspn(arg, "="), arg);
}

/* A module flag given in a run where the module is off. */
static int refuse_module_flag(const pfl_run_options *o, const pfl_module *m, const pfl_param *p) {
    char methods[256] = "";
    for (int i = 0; i < pfl_algo_count(); i++)
        if (pfl_algo_at(i)->modules & m->bit) {
            const size_t len = strlen(methods);
            snprintf(methods + len, sizeof methods - len, "%s%s", len ? " or " : ", or --algo ", pfl_algo_at(i)->name);
        }
    char flag[64], takers[512];
    const pfl_param *other;
    snprintf(flag, sizeof flag, "--%s", p->name);
    methods_taking(flag, takers, sizeof takers, &other);
    return pfl_err("--%s: a flag of the %s module, which is off in this %s run (add --%s%s)%s%s", p->name, m->name,
                   o->algo, m->params[0].name, methods, other ? "; methods that take it too: " : "", takers);
}

int pfl_run_options_parse(pfl_run_options *o, int argc, char **argv, bool stored) {
    const char *name = algo_of(argc, argv);
    const pfl_algo *algo = pfl_algo_find(name ? name : pfl_run_params[0].def_text);
    if (!algo || pfl_run_options_init(o, algo)) return -1;
    pfl_param_blocks b = pfl_run_blocks(o);
    /* module flags given, checked once every switch is known */
    const pfl_param *given[64];
    const pfl_module *given_module[64];
    int num_given = 0;
    bool top_cnt_given = false, seed_given = false;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const pfl_module *module;
        const pfl_param *p = run_flag(algo, arg, &module);
        char flag[64];
        flag_text(arg, flag, sizeof flag);
        if (!p && (!strcmp(arg, "--help") || !strcmp(arg, "-h")))
            return pfl_err("%s: asks for help, which is not a flag of a run", arg);
        if (!p) {
            char methods[512];
            const pfl_param *other;
            methods_taking(arg, methods, sizeof methods, &other);
            if (arg[0] != '-') return pfl_err("%s: unexpected argument (flags start with --; see --help)", arg);
            if (!other) return pfl_err("%s: unknown flag (see --help)", flag);
            if (!stored) return pfl_err("%s: not a flag of %s (taken by %s)", flag, algo->name, methods);
            if (other->type != PFL_PARAM_BOOL && !strchr(arg, '=')) i++; /* skip its value too */
            continue;
        }
        const char *eq = strchr(arg, '=');
        const char *value = "";
        if (p->type != PFL_PARAM_BOOL) {
            value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!value) return pfl_err("--%s: missing value (%s)", p->name, p->metavar ? p->metavar : "value");
        } else if (eq) {
            return pfl_err("--%s takes no value", p->name);
        }
        if (pfl_param_parse(p, &b, value)) return -1;
        top_cnt_given |= !strcmp(p->name, "top-cnt");
        seed_given |= !strcmp(p->name, "seed");
        o->clients_given |= !strcmp(p->name, "clients");
        o->train_fraction_given |= !stored && !strcmp(p->name, "train-fraction"); /* a checkpoint stores every flag */
        if (module && p != &module->params[0] && num_given < 64)
            given[num_given] = p, given_module[num_given++] = module;
    }
    if (!stored && top_cnt_given && !o->auto_break)
        return pfl_err("--top-cnt: counts evaluations for --auto-break, which is off (add --auto-break)");
    if (o->seeds && pfl_parse_seeds(o->seeds, NULL, NULL)) return -1;
    if (!stored && o->seeds && !o->out)
        return pfl_err("--seeds: needs --out DIR (seed N writes DIR/seed-N, the summary over seeds DIR/summary.json)");
    if (!stored && o->seeds && seed_given)
        return pfl_err("--seed and --seeds: give one (--seeds %s runs each seed of its list)", o->seeds);
    /* round(join x clients) clients train each round: none would be a run that trains nothing */
    if (!stored && lround(o->cfg.join * o->cfg.clients) < 1)
        return pfl_err("--join %g: selects round(%g x %d) = 0 of the clients each round; give at least %g",
                       o->cfg.join, o->cfg.join, o->cfg.clients, 0.5 / o->cfg.clients);
    /* the literal reading is a way of aggregating masks: it switches the mask on */
    o->cfg.modules.flayer_mask |= o->cfg.modules.flayer_mask_literal;
    for (int k = 0; k < num_given && !stored; k++)
        if (!pfl_module_on(given_module[k], &o->cfg.modules, algo->modules))
            return refuse_module_flag(o, given_module[k], given[k]);
    if (pfl_run_resolve_layers(o)) return -1;
    /* what the method cannot run is a usage error, refused before anything is written */
    return algo->check ? algo->check(&o->cfg) : 0;
}

/* ---- layer counts and selections (nn/layer_units.h) ---- */

typedef struct {
    pfl_run_options *o;
    const pfl_model *m;
    pfl_layer_unit unit;
    bool need_model; /* first pass: does any parameter need the model? */
    int failed;
} layer_resolution;

/* The tensors [*a, *b) a default or auto count of rows covers (the first rows). */
static void first_rows_tensors(const pfl_model *m, double rows, int *a, int *b) {
    const int r = (int)rows;
    *a = 0;
    *b = r < m->num_layers ? m->layers[r].first_tensor : m->num_tensors;
}

/* The number the method reads for the tensors [a, b), by the parameter's kind. */
static int layers_number(const layer_resolution *r, const pfl_param *p, const char *text, int a, int b, double *v) {
    const pfl_model *m = r->m;
    if (p->layers == PFL_LAYERS_TOP_ROWS) {
        const int row = pfl_row_of_tensor(m, a);
        if (row < m->num_layers && m->layers[row].first_tensor != a)
            return pfl_err("--%s '%s' (%s): starts at %s, inside the row %s; the method takes whole rows (pfl "
                           "model --model %s --tensors lists them)",
                           p->name, text, pfl_layer_unit_name(r->unit), m->tensors[a].name, m->layers[row].name,
                           m->name);
        *v = m->num_layers - row;
        return 0;
    }
    if (p->layers == PFL_LAYERS_FIRST_ROWS) { /* a fraction counts the next row's tensors (fedtsdp.h) */
        const int row = pfl_row_of_tensor(m, b);
        *v = row >= m->num_layers ? m->num_layers
                                  : row + (double)(b - m->layers[row].first_tensor) / m->layers[row].num_tensors;
        return 0;
    }
    int first[PFL_MAX_TENSORS + 1];
    const int n = pfl_unit_bounds(m, r->unit, first);
    for (int k = 0; k <= n; k++)
        if (first[k] == b) return *v = k, 0;
    return pfl_err("--%s '%s': ends at %s, inside a unit of --layer-unit %s, which the method fuses whole", p->name,
                   text, m->tensors[b - 1].name, pfl_layer_unit_name(r->unit));
}

static void resolve_layer_param(const pfl_param *p, int table, void *ctx) {
    (void)table;
    layer_resolution *r = ctx;
    if (!p->layers || r->failed) return;
    pfl_param_blocks b = pfl_run_blocks(r->o);
    const char *given = pfl_layer_spec(&r->o->layer_specs, p->name);
    const bool count = given && pfl_selection_is_count(given);
    /* counts of rows, and defaults in rows where the method reads rows: today's numbers */
    if (r->unit == PFL_UNIT_ROWS ? !given || count : !given && p->layers != PFL_LAYERS_FIRST_UNITS) return;
    if (r->need_model) return;
    if (!r->m) {
        r->need_model = true;
        return;
    }
    int a = 0, e = 0;
    const pfl_select_side side = p->layers == PFL_LAYERS_TOP_ROWS ? PFL_SELECT_TOP : PFL_SELECT_FIRST;
    char text[160];
    if (given) {
        snprintf(text, sizeof text, "%s", given);
        if (pfl_selection_resolve(r->m, p->name, given, r->unit, side, &a, &e)) {
            r->failed = -1;
            return;
        }
    } else { /* the default or auto, a count of rows, in a method that counts units */
        if (pfl_param_resolve_auto(p, &b, r->o->model)) {
            r->failed = -1;
            return;
        }
        char rows[64];
        pfl_param_format(p, &b, false, rows, sizeof rows);
        snprintf(text, sizeof text, "%s rows by default", rows);
        first_rows_tensors(r->m, atof(rows), &a, &e);
    }
    double v = 0.0;
    if (layers_number(r, p, text, a, e, &v) || pfl_param_set_number(p, &b, v)) r->failed = -1;
}

int pfl_run_resolve_layers(pfl_run_options *o) {
    pfl_layer_unit unit;
    if (pfl_layer_unit_parse("layer-unit", o->layer_unit, &unit)) return -1;
    o->cfg.algo.layer_unit = (int)unit;
    layer_resolution r = {.o = o, .unit = unit};
    pfl_run_each_param(o, resolve_layer_param, &r); /* does any need the model? */
    if (!r.need_model) return 0;
    int c, h, w, classes;
    if (pfl_run_known_shape(o->data, &c, &h, &w, &classes))
        return pfl_err("--data %s: layer names and --layer-unit need a dataset whose input shape pfl knows", o->data);
    pfl_model *m = pfl_malloc(sizeof *m); /* large tables: not on the stack */
    if (!m) return -1;
    if (pfl_model_build(m, o->model, c, h, w, classes)) {
        free(m);
        return -1;
    }
    r.m = m, r.need_model = false;
    pfl_run_each_param(o, resolve_layer_param, &r);
    free(m);
    return r.failed;
}

/* The --bn a method sets in its run_defaults (FedTSDP's paper shares a layer whole; pFedMe, CFL and FedALP
 * train from a model not the client's own), or NULL. */
static const char *method_bn(const pfl_algo *algo) {
    for (const char *const *d = algo->run_defaults; d && d[0]; d += 2)
        if (!strcmp(d[0], "bn")) return d[1];
    return NULL;
}

/* --device: the backend, which this machine must be able to run. */
static int resolve_device(pfl_run_options *o) {
    const pfl_backend *be = pfl_backend_find(o->device ? o->device : "cpu");
    if (!be || (be->available && be->available())) return -1;
    if (o->tf32 && !be->device) return pfl_err("--tf32: only for a GPU (--device cuda)");
    pfl_backend_set_tf32(o->tf32);
    o->cfg.backend = be == &pfl_backend_cpu ? NULL : be;
    return 0;
}

/* Whether the method sets the default of the run's flag `name` to `value` (pfl_algo.run_defaults). */
static bool run_default_is(const pfl_algo *algo, const char *name, const char *value) {
    for (const char *const *d = algo->run_defaults; d && d[0]; d += 2)
        if (!strcmp(d[0], name)) return !strcmp(d[1], value);
    return false;
}

int pfl_run_options_finish(pfl_run_options *o) {
    const pfl_algo *algo = pfl_algo_find(o->algo);
    if (!algo || resolve_device(o)) return -1;
    pfl_param_blocks b = pfl_run_blocks(o);
    for (int i = 0; i < algo->num_params; i++)
        if (pfl_param_resolve_auto(&algo->params[i], &b, o->model)) return -1;
    o->partition = pfl_partition_resolve(o->data, o->partition); /* --data pfllib:DIR: its own clients */
    if (o->bn && !strcmp(o->bn, "auto")) {
        const char *method = method_bn(algo);
        o->bn = !pfl_model_has_batchnorm(o->model) ? "shared" : method ? method : "stats-local";
    }
    /* a method that is --bn local by definition (FedBN) on a model without
     * BatchNorm has nothing to keep local: FedAvg's shared mode */
    if (o->bn && !strcmp(o->bn, "local") && !pfl_model_has_batchnorm(o->model) &&
        run_default_is(algo, "bn", "local"))
        o->bn = "shared";
    return 0;
}

void pfl_run_each_param(const pfl_run_options *o, pfl_run_param_fn fn, void *ctx) {
    const pfl_algo *algo = pfl_algo_find(o->algo);
    for (int i = 0; i < pfl_run_num_params; i++) fn(&pfl_run_params[i], PFL_RUN_COMMON, ctx);
    if (!algo) return;
    for (int i = 0; i < algo->num_params; i++) fn(&algo->params[i], PFL_RUN_METHOD, ctx);
    for (int k = 0; pfl_modules[k]; k++) {
        if (!pfl_module_on(pfl_modules[k], &o->cfg.modules, algo->modules)) continue;
        for (int i = 0; i < pfl_modules[k]->num_params; i++) {
            const pfl_param *p = &pfl_modules[k]->params[i];
            if (!find_in(algo->params, algo->num_params, p->name)) fn(p, PFL_RUN_MODULE, ctx);
        }
    }
}

typedef struct {
    pfl_param_blocks b;
    char *buf;
    size_t used, cap;
    bool failed;
} flag_list;

static void append_flag(const pfl_param *p, int table, void *ctx) {
    (void)table;
    flag_list *l = ctx;
    char value[4096], text[4200];
    if (l->failed || !pfl_param_format(p, &l->b, true, value, sizeof value)) return;
    int k;
    if (p->type == PFL_PARAM_BOOL) {
        if (strcmp(value, "true")) return;
        k = snprintf(text, sizeof text, "--%s", p->name);
    } else {
        k = snprintf(text, sizeof text, "--%s=%s", p->name, value);
    }
    if (k >= (int)sizeof text) {
        l->failed = true;
        pfl_err("--%s: value too long for a checkpoint", p->name);
        return;
    }
    while (l->used + (size_t)k + 1 > l->cap) {
        char *grown = realloc(l->buf, l->cap *= 2);
        if (!grown) {
            l->failed = true;
            pfl_err("out of memory");
            return;
        }
        l->buf = grown;
    }
    memcpy(l->buf + l->used, text, (size_t)k + 1);
    l->used += (size_t)k + 1;
}

char *pfl_run_flags(const pfl_run_options *o, size_t *len) {
    flag_list l = {.b = pfl_run_blocks(o), .cap = 256};
    if (!(l.buf = pfl_malloc(l.cap))) return NULL;
    pfl_run_each_param(o, append_flag, &l);
    if (l.failed) {
        free(l.buf);
        return NULL;
    }
    *len = l.used;
    return l.buf;
}
