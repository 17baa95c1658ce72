/* Parameters as data (util/params.h) and the run's flags (run/run.h): values
 * parse within bounds and format back to the same bits, "auto" resolves by
 * the model, each method gets its own defaults, a method registered at run
 * time declares parameters of its own that live in the extra store, a model
 * registered at run time builds and is known by name, and a
 * flag no table of the run declares is refused (skipped in stored flags). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "algos/algos.h"
#include "check.h"
#include "run/run.h"
#include "util/err.h"

typedef struct {
    int n;
    float f;
    double d;
    bool on;
    const char *s;
} block;

static double auto_by_model(const char *model) { return !strcmp(model, "cnn") ? 2 : 1; }

static const pfl_param table[] = {
    {.name = "n", .type = PFL_PARAM_INT, .block = PFL_BLOCK_RUN, .offset = offsetof(block, n), .def = 3, .min = 1,
     .max = 10, .auto_value = auto_by_model},
    {.name = "f", .type = PFL_PARAM_FLOAT, .block = PFL_BLOCK_RUN, .offset = offsetof(block, f), .def = 0.1,
     .min = 0, .max = 1, .min_exclusive = true},
    {.name = "d", .type = PFL_PARAM_DOUBLE, .block = PFL_BLOCK_RUN, .offset = offsetof(block, d), .def = 0.5,
     .max = 1e6},
    {.name = "on", .type = PFL_PARAM_BOOL, .block = PFL_BLOCK_RUN, .offset = offsetof(block, on)},
    {.name = "s", .type = PFL_PARAM_STRING, .block = PFL_BLOCK_RUN, .offset = offsetof(block, s), .def_text = "x"},
    {.name = "extra-k", .type = PFL_PARAM_DOUBLE, .block = PFL_BLOCK_EXTRA, .def = 7, .max = 100},
};

static void test_parse_and_format(void) {
    block v;
    pfl_param_store store = {0};
    pfl_param_blocks b = {{NULL}, NULL};
    b.at[PFL_BLOCK_RUN] = &v, b.at[PFL_BLOCK_EXTRA] = &store;
    for (int i = 0; i < 6; i++) CHECK(pfl_param_reset(&table[i], &b) == 0, "reset %s", table[i].name);
    CHECK(v.n == 3 && v.f == 0.1f && v.d == 0.5 && !v.on && !strcmp(v.s, "x"), "defaults");
    CHECK(pfl_param_store_get(&store, "extra-k") == 7, "extra default in the store");
    CHECK(pfl_param_parse(&table[0], &b, "11") < 0 && strstr(pfl_errmsg(), "--n"), "above max: %s", pfl_errmsg());
    CHECK(pfl_param_parse(&table[0], &b, "2.5") < 0 && strstr(pfl_errmsg(), "whole"), "not whole: %s", pfl_errmsg());
    CHECK(pfl_param_parse(&table[1], &b, "0") < 0, "exclusive minimum");
    CHECK(pfl_param_parse(&table[1], &b, "abc") < 0 && strstr(pfl_errmsg(), "'abc' is not a number"), "%s",
          pfl_errmsg());
    CHECK(pfl_param_parse(&table[3], &b, "1") < 0, "a switch takes no value");
    CHECK(pfl_param_parse(&table[4], &b, "") < 0, "empty string");
    /* a float that has no short decimal form comes back to the same bits */
    CHECK(pfl_param_parse(&table[1], &b, "0.3") == 0, "parse 0.3");
    char text[64];
    CHECK(pfl_param_format(&table[1], &b, true, text, sizeof text), "format");
    const float before = v.f;
    v.f = 0.0f;
    CHECK(pfl_param_parse(&table[1], &b, text) == 0 && memcmp(&v.f, &before, sizeof before) == 0,
          "exact text %s gives the same bits", text);
    CHECK(pfl_param_parse(&table[3], &b, "") == 0 && v.on, "switch on");
    CHECK(pfl_param_parse(&table[5], &b, "42") == 0 && pfl_param_store_get(&store, "extra-k") == 42, "extra set");
    CHECK(isnan(pfl_param_store_get(&store, "absent")), "absent names read NaN");
    /* auto: held until resolved by the model's name */
    CHECK(pfl_param_parse(&table[0], &b, "auto") == 0 && pfl_param_is_auto(&table[0], &b), "auto parsed");
    CHECK(pfl_param_format(&table[0], &b, true, text, sizeof text) && !strcmp(text, "auto"), "auto formats");
    CHECK(pfl_param_resolve_auto(&table[0], &b, "cnn") == 0 && v.n == 2, "auto on cnn: %d", v.n);
    CHECK(pfl_param_parse(&table[1], &b, "auto") < 0, "auto where it is not allowed");
}

/* A method written outside pfl: FedAvg's stages, and one parameter that has
 * no field in pfl_algo_params. */
static const pfl_param custom_params[] = {
    {.name = "custom-k", .type = PFL_PARAM_DOUBLE, .block = PFL_BLOCK_EXTRA, .def = 1.5, .max = 10, .metavar = "K",
     .help = "a parameter of the custom method"},
    {PFL_ALGO_PARAM(FLOAT, "mu", mu), .def = 0.25, .max = 1e6, .help = "mu, with this method's default"},
};
static double seen_k = -1; /* what the method's hook read */

static void custom_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    seen_k = pfl_fl_param(fl, "custom-k");
    pfl_default_local_train(fl, client, w, model, stats);
}

static const pfl_algo custom = {.name = "custom", .description = "test method", .has_global = true,
                                .local_train = custom_train, PFL_PARAMS(custom_params)};

static const pfl_param bad_params[] = {{.name = "Bad Name", .type = PFL_PARAM_INT, .block = PFL_BLOCK_EXTRA}};
static const pfl_algo bad = {.name = "bad", .description = "bad table", PFL_PARAMS(bad_params)};

static void test_registered_method(void) {
    CHECK(pfl_algo_find("custom") == NULL, "not there before registration");
    CHECK(pfl_algo_register(&custom) == 0, "register: %s", pfl_errmsg());
    CHECK(pfl_algo_register(&custom) < 0, "a name registers once");
    CHECK(pfl_algo_register(&pfl_algo_fedavg) < 0, "a built-in name cannot be registered");
    CHECK(pfl_algo_register(&bad) < 0 && strstr(pfl_errmsg(), "Bad Name"), "bad flag name: %s", pfl_errmsg());
    CHECK(pfl_algo_find("custom") == &custom, "found");
    CHECK(pfl_algo_at(pfl_algo_count() - 1) == &custom, "listed last");

    pfl_run_options o;
    char *argv[] = {"--algo", "custom", "--custom-k", "3", "--rounds=2"};
    CHECK(pfl_run_options_parse(&o, 5, argv, false) == 0, "parse: %s", pfl_errmsg());
    CHECK(pfl_param_store_get(&o.cfg.extra, "custom-k") == 3 && o.cfg.rounds == 2, "values");
    CHECK(o.cfg.algo.mu == 0.25f, "the method's own default of mu: %g", (double)o.cfg.algo.mu);
    char *bad_argv[] = {"--algo", "custom", "--lambda", "1"};
    CHECK(pfl_run_options_parse(&o, 4, bad_argv, false) < 0 && strstr(pfl_errmsg(), "ditto"),
          "Ditto's flag refused: %s", pfl_errmsg());
    CHECK(pfl_run_options_parse(&o, 4, bad_argv, true) == 0 && o.cfg.algo.lambda == 0.0f,
          "stored flags: another method's flag and its value skipped");
    char *fedavg_argv[] = {"--algo=fedavg", "--custom-k", "3"};
    CHECK(pfl_run_options_parse(&o, 3, fedavg_argv, false) < 0 && strstr(pfl_errmsg(), "custom"),
          "fedavg refuses the custom method's flag: %s", pfl_errmsg());

    /* the flags a checkpoint stores hold the extra parameter and parse back */
    CHECK(pfl_run_options_parse(&o, 5, argv, false) == 0, "parse again");
    size_t len;
    char *flags = pfl_run_flags(&o, &len);
    CHECK(flags != NULL, "flags: %s", pfl_errmsg());
    bool has = false;
    for (size_t i = 0; flags && i < len; i += strlen(flags + i) + 1) has |= !strcmp(flags + i, "--custom-k=3");
    CHECK(has, "--custom-k=3 stored");
    free(flags);
}

/* A model written outside pfl: Flatten, Linear(in, 8), ReLU, Linear(8, classes). */
static int build_custom_model(pfl_model *m) {
    return pfl_model_flatten(m) || pfl_model_linear(m, "hidden", 8) || pfl_model_relu(m) ||
                   pfl_model_linear(m, "out", m->classes)
               ? -1
               : 0;
}
static const pfl_model_def custom_model = {.name = "custom-net", .build = build_custom_model};
/* one with BatchNorm: --bn auto keeps its statistics local under ALA */
static int build_custom_bn(pfl_model *m) {
    return pfl_model_conv(m, "conv", 2, 3, 1, 1, false) || pfl_model_batchnorm(m, "bn") || pfl_model_relu(m) ||
                   pfl_model_flatten(m) || pfl_model_linear(m, "out", m->classes)
               ? -1
               : 0;
}
static const pfl_model_def custom_bn = {.name = "custom-bn", .build = build_custom_bn, .batchnorm = true};

static void test_registered_model(void) {
    pfl_model *m = malloc(sizeof *m);
    CHECK(m && !pfl_model_known("custom-net"), "not known before registration");
    CHECK(pfl_model_register(&custom_model) == 0, "register: %s", pfl_errmsg());
    CHECK(pfl_model_register(&custom_bn) == 0, "register: %s", pfl_errmsg());
    CHECK(pfl_model_register(&custom_model) < 0 && strstr(pfl_errmsg(), "exists"), "a name registers once");
    const pfl_model_def taken = {.name = "cnn", .build = build_custom_model};
    CHECK(pfl_model_register(&taken) < 0, "a zoo name cannot be registered");
    const pfl_model_def fasttext = {.name = "fasttext-2", .build = build_custom_model};
    CHECK(pfl_model_register(&fasttext) < 0, "fasttext's names are the zoo's");
    const pfl_model_def long_name = {.name = "a-very-long-model", .build = build_custom_model};
    CHECK(pfl_model_register(&long_name) < 0 && strstr(pfl_errmsg(), "15"), "16 letters: %s", pfl_errmsg());
    const pfl_model_def upper = {.name = "Net", .build = build_custom_model};
    CHECK(pfl_model_register(&upper) < 0, "upper case refused");
    const pfl_model_def no_build = {.name = "nothing"};
    CHECK(pfl_model_register(&no_build) < 0 && strstr(pfl_errmsg(), "build"), "no build: %s", pfl_errmsg());
    CHECK(pfl_model_known("custom-net") && strstr(pfl_model_choices(), ", custom-net"), "known and listed");
    CHECK(m && pfl_model_build(m, "custom-net", 1, 28, 28, 10) == 0, "build: %s", pfl_errmsg());
    if (m) {
        CHECK(m->num_layers == 2 && m->num_params == 784 * 8 + 8 + 8 * 10 + 10, "layers %d, params %zu", m->num_layers,
              m->num_params);
        CHECK(!strcmp(m->name, "custom-net") && !strcmp(m->tensors[0].name, "hidden.weight"), "names");
    }
    CHECK(m && pfl_model_build(m, "custom-bn", 1, 4, 4, 3) == 0 && m->num_state == 4, "BatchNorm state");
    free(m);
    CHECK(!pfl_model_has_batchnorm("custom-net") && pfl_model_has_batchnorm("custom-bn"), "batchnorm flags");
}

/* --bn auto: the running statistics stay with the clients (PFLlib's) on a
 * model with BatchNorm, except for the methods that say otherwise in their
 * run defaults (FedTSDP's paper; pFedMe, CFL and FedALP, which train from a
 * model not the client's own). */
static const char *bn_of(const char *algo, const char *model, const char *extra) {
    static pfl_run_options o;
    char *argv[] = {"--algo", (char *)algo, "--model", (char *)model, (char *)extra};
    if (pfl_run_options_parse(&o, extra ? 5 : 4, argv, false) || pfl_run_options_finish(&o)) return pfl_errmsg();
    return o.bn;
}

static void test_bn_auto(void) {
    CHECK(!strcmp(bn_of("fedala", "resnet18", NULL), "stats-local"), "fedala resnet18");
    CHECK(!strcmp(bn_of("flayer", "resnet18-cifar", NULL), "stats-local"), "flayer resnet18-cifar");
    CHECK(!strcmp(bn_of("fedavg", "resnet18", "--ala"), "stats-local"), "fedavg --ala resnet18");
    CHECK(!strcmp(bn_of("fedavg", "resnet18", NULL), "stats-local"), "fedavg resnet18");
    CHECK(!strcmp(bn_of("fedrod", "resnet18", NULL), "stats-local"), "fedrod resnet18");
    CHECK(!strcmp(bn_of("gpfl", "resnet18", "--bn=auto"), "stats-local"), "gpfl resnet18, auto by name");
    const char *own_mode[] = {"fedtsdp", "pfedme", "cfl", "fedalp"};
    for (int i = 0; i < 4; i++) {
        CHECK(!strcmp(bn_of(own_mode[i], "resnet18", NULL), "shared"), "%s resnet18: its own default", own_mode[i]);
        CHECK(!strcmp(bn_of(own_mode[i], "resnet18", "--bn=auto"), "shared"), "%s resnet18 --bn auto", own_mode[i]);
    }
    CHECK(!strcmp(bn_of("fedala", "cnn", NULL), "shared"), "fedala cnn (no BatchNorm)");
    CHECK(!strcmp(bn_of("fedala", "resnet18", "--bn=local"), "local"), "an explicit --bn stays");
    CHECK(!strcmp(bn_of("fedala", "custom-bn", NULL), "stats-local"), "fedala, a registered model with BatchNorm");
    CHECK(!strcmp(bn_of("fedala", "custom-net", NULL), "shared"), "fedala, a registered model without");
}

static void test_method_defaults(void) {
    pfl_run_options o;
    CHECK(pfl_run_options_init(&o, &pfl_algo_fedtsdp) == 0 && o.public_set && !strcmp(o.public_set, "test"),
          "fedtsdp's default --public is test");
    CHECK(pfl_run_options_init(&o, &pfl_algo_fedavg) == 0 && o.public_set == NULL, "fedavg holds nothing out");
    CHECK(pfl_run_options_init(&o, &pfl_algo_fedprox) == 0 && o.cfg.algo.mu == 0.001f, "fedprox mu");
}

static void count_line(const char *line, void *ctx) {
    (void)line;
    ++*(int *)ctx;
}

/* The experiment without the command line: a program linking libpfl runs
 * its registered method, with progress lines through a callback. */
static void test_library_run(void) {
    struct stat st;
    const char *dir = getenv("PFL_DATA") && *getenv("PFL_DATA") ? getenv("PFL_DATA") : "data";
    char probe[512];
    snprintf(probe, sizeof probe, "%s/mnist", dir);
    if (stat(probe, &st) != 0) {
        printf("skipped: the library run (no %s)\n", probe);
        return;
    }
    char out[] = "/tmp/pfl_test_run_XXXXXX";
    CHECK(mkdtemp(out) != NULL, "temporary directory");
    char *argv[] = {"--algo", "custom", "--custom-k", "3", "--data", "mnist", "--model", "mlp", "--partition",
                    "onelabel:20/10", "--clients", "3", "--rounds", "1", "--threads", "1"};
    pfl_run_options o;
    CHECK(pfl_run_options_parse(&o, 16, argv, false) == 0, "parse: %s", pfl_errmsg());
    int lines = 0;
    o.data_dir = dir, o.out = out, o.progress = count_line, o.progress_ctx = &lines;
    CHECK(pfl_run(&o, NULL) == 0, "pfl_run: %s", pfl_errmsg());
    CHECK(seen_k == 3, "the method's hook read custom-k = %g", seen_k);
    CHECK(lines >= 5, "progress lines through the callback: %d", lines);
    char path[600], text[8192] = "";
    snprintf(path, sizeof path, "%s/summary.json", out);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "summary.json written");
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = '\0';
        fclose(f);
    }
    CHECK(strstr(text, "\"custom_k\": 3") && strstr(text, "\"mu\": 0.25"), "summary records the method's parameters");
    remove(path);
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    remove(path);
    rmdir(out);
}

int main(void) {
    test_parse_and_format();
    test_method_defaults();
    test_registered_model();
    test_bn_auto();
    test_registered_method();
    test_library_run();
    TEST_MAIN_END();
}
