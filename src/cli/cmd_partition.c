/* pfl partition: shows how a dataset is split over clients (a table like
 * PFLlib's generator prints), and can save the split for other tools. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "nn/model.h" /* PFL_FASTTEXT_VOCAB */
#include "run/results.h"
#include "run/run.h"
#include "util/err.h"
#include "util/json.h"
#include "util/safe_write.h"

typedef struct {
    const char *data, *partition, *data_dir, *save, *plot, *export_format;
    int clients;
    uint64_t seed;
    bool quiet;
} partition_options;

static const char partition_usage[] =
    "Usage: pfl partition [flags]\n\n"
    "Splits a dataset over clients exactly as pfl run does with the same flags and prints\n"
    "what the scheme does, then per client the train/test sizes and the samples of each class\n"
    "(train and test together), then the totals. Schemes: README \"--partition\".\n"
    "With --export pfllib DIR it also writes the split as a PFLlib folder DIR (config.json,\n"
    "train/<i>.npz, test/<i>.npz), which PFLlib's main.py reads as its dataset.";

static void count_classes(const pfl_dataset *d, const pfl_client_data *cd, long *counts) {
    memset(counts, 0, sizeof(long) * (size_t)d->classes);
    for (int i = 0; i < cd->n_train; i++) counts[d->labels[cd->train[i]]]++;
    for (int i = 0; i < cd->n_test; i++) counts[d->labels[cd->test[i]]]++;
}

static int compare_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Samples dealt (a sample dealt twice counts twice: dirc draws with
 * replacement, cfr reuses a class that runs out), how many distinct ones,
 * and the smallest, median and largest client. */
static void print_totals(const pfl_dataset *d, const pfl_partition *p) {
    long train = 0, test = 0, distinct = 0;
    char *seen = calloc((size_t)d->n, 1);
    int *sizes = malloc(sizeof *sizes * (size_t)p->num_clients);
    for (int c = 0; c < p->num_clients; c++) {
        const pfl_client_data *cd = &p->clients[c];
        train += cd->n_train, test += cd->n_test;
        sizes[c] = cd->n_train + cd->n_test;
        for (int i = 0; seen && i < sizes[c]; i++) distinct += !seen[cd->train[i]]++; /* test follows train */
    }
    printf("total: %ld train, %ld test: %ld samples dealt", train, test, train + test);
    if (seen && distinct < train + test)
        printf(", %ld distinct (%ld dealt again)", distinct, train + test - distinct);
    printf("; %ld of the %d samples used\n", seen ? distinct : train + test, d->n);
    if (sizes) {
        qsort(sizes, (size_t)p->num_clients, sizeof *sizes, compare_int);
        printf("per client (train + test): smallest %d, median %d, largest %d\n", sizes[0],
               sizes[p->num_clients / 2], sizes[p->num_clients - 1]);
    }
    free(seen);
    free(sizes);
}

static void print_table(const pfl_dataset *d, const pfl_partition *p, const char *about) {
    long counts[256];
    printf("partition %s\n", about);
    printf("%6s %7s %6s %7s %7s  %s\n", "client", "train", "test", "total", "classes",
           "class mix, train + test (class:count)");
    for (int c = 0; c < p->num_clients; c++) {
        const pfl_client_data *cd = &p->clients[c];
        count_classes(d, cd, counts);
        int present = 0;
        for (int k = 0; k < d->classes; k++) present += counts[k] > 0;
        printf("%6d %7d %6d %7d %7d ", c, cd->n_train, cd->n_test, cd->n_train + cd->n_test, present);
        for (int k = 0; k < d->classes; k++)
            if (counts[k]) printf(" %d:%ld", k, counts[k]);
        putchar('\n');
    }
    print_totals(d, p);
}

static void write_index_lists(FILE *f, const pfl_partition *p, bool train) {
    fputc('[', f);
    for (int c = 0; c < p->num_clients; c++) {
        const pfl_client_data *cd = &p->clients[c];
        const int *idx = train ? cd->train : cd->test;
        int n = train ? cd->n_train : cd->n_test;
        fputs(c ? ",\n  [" : "\n  [", f);
        for (int i = 0; i < n; i++) fprintf(f, i ? ",%d" : "%d", idx[i]);
        fputc(']', f);
    }
    fputs("]", f);
}

/* JSON with each client's train and test indices into the merged dataset
 * (train files first, then test files), for reference implementations. */
static int save_partition(const partition_options *o, const pfl_partition *p) {
    pfl_atomic_file a;
    if (pfl_atomic_open(&a, o->save)) return -1;
    fputs("{\"dataset\": ", a.f), pfl_json_string(a.f, o->data);
    fputs(", \"partition\": ", a.f), pfl_json_string(a.f, o->partition);
    fprintf(a.f, ", \"clients\": %d, \"seed\": %llu,\n\"train\": ", o->clients, (unsigned long long)o->seed);
    write_index_lists(a.f, p, true);
    fputs(",\n\"test\": ", a.f);
    write_index_lists(a.f, p, false);
    fputs("}\n", a.f);
    return pfl_atomic_commit(&a);
}

/* --export pfllib DIR: text gets the vocabulary pfl run's fasttext would
 * build (its default size), so the folder's ids are the ones pfl trains on. */
static int export_pfllib(const partition_options *o, pfl_dataset *d, const pfl_partition *p, const char *dir) {
    const char *partition = pfl_partition_resolve(o->data, o->partition);
    pfl_partition_spec spec;
    if (pfl_partition_parse(&spec, partition)) return -1;
    if (d->text && !d->text->vocab_size && pfl_text_build_vocab(d, p, PFL_FASTTEXT_VOCAB)) return -1;
    char about[512];
    snprintf(about, sizeof about, "pfl partition --data %s --partition %s --clients %d --seed %llu", o->data,
             partition, o->clients, (unsigned long long)o->seed);
    const bool dirichlet = spec.kind == PFL_PART_DIR || spec.kind == PFL_PART_DIRC;
    if (pfl_pfllib_export(d, p, partition, dirichlet ? spec.alpha : NAN, about, dir)) return -1;
    if (!o->quiet) printf("wrote %s (PFLlib's layout: config.json, train/<i>.npz, test/<i>.npz)\n", dir);
    return 0;
}

/* The flags, and the one operand --export takes after its format: the folder. */
static int parse_partition_args(const arg_spec *specs, int n, int argc, char **argv, partition_options *o,
                                const char **export_dir) {
    char **operands = malloc(sizeof(char *) * (size_t)(argc > 0 ? argc : 1));
    int num_operands = 0;
    int rc = operands ? args_parse_operands(specs, n, argc, argv, partition_usage, operands, &num_operands)
                      : pfl_err("out of memory");
    if (rc == 0 && o->export_format && strcmp(o->export_format, "pfllib"))
        rc = pfl_err("--export %s: the one format is pfllib (--export pfllib DIR)", o->export_format);
    else if (rc == 0 && o->export_format && num_operands == 0)
        rc = pfl_err("--export pfllib: the folder to write is missing (--export pfllib DIR)");
    else if (rc == 0 && num_operands > (o->export_format ? 1 : 0))
        rc = pfl_err("%s: unexpected argument (see --help)", operands[o->export_format ? 1 : 0]);
    if (rc == 0 && o->export_format) *export_dir = operands[0];
    free(operands);
    return rc;
}

int cmd_partition(int argc, char **argv) {
    partition_options o = {.data = "mnist", .partition = "pat", .clients = 0, .seed = 1}; /* 0: not given */
    o.data_dir = pfl_default_data_dir();
    const arg_spec specs[] = {
        {"data", "data", ARG_STRING, &o.data, 0, 0, false, "NAME", "dataset: mnist, fmnist, cifar10, cifar100, cifar100-coarse, svhn, tinyimagenet, agnews, pfllib:DIR"},
        {"partition", NULL, ARG_STRING, &o.partition, 0, 0, false, "P", pfl_partition_forms},
        {"clients", "nc", ARG_INT, &o.clients, 1, 1e7, false, "N",
         "number of clients (default 20; on a PFLlib folder its own num_clients)"},
        {"seed", NULL, ARG_U64, &o.seed, 0, 9007199254740992.0, false, "S", "seed"},
        {"data-dir", NULL, ARG_STRING, &o.data_dir, 0, 0, false, "DIR", "data directory (env PFL_DATA)"},
        {"save", NULL, ARG_STRING, &o.save, 0, 0, false, "FILE", "also write the index lists as JSON"},
        {"plot", NULL, ARG_STRING, &o.plot, 0, 0, false, "PREFIX", "also draw clients x classes (samples of each class per client) into PREFIX.png and PREFIX.svg (gnuplot)"},
        {"export", NULL, ARG_STRING, &o.export_format, 0, 0, false, "pfllib DIR", "also write the split into the folder DIR in PFLlib's layout (text: with the vocabulary of --model fasttext)"},
        {"quiet", NULL, ARG_FLAG, &o.quiet, 0, 0, false, NULL, "print no table"},
    };
    const char *export_dir = NULL;
    int parsed = parse_partition_args(specs, (int)(sizeof specs / sizeof specs[0]), argc, argv, &o, &export_dir);
    if (parsed == 1) return 0;
    if (parsed < 0) {
        fprintf(stderr, "pfl partition: %s\n", pfl_errmsg());
        return 2;
    }
    /* as pfl run: --clients left out takes a PFLlib folder's own count, else 20 */
    const bool folder = !strncmp(o.data, "pfllib:", 7) && o.data[7];
    if (o.clients == 0 && (folder ? pfl_pfllib_clients(o.data + 7, &o.clients) : (o.clients = 20, 0))) {
        fprintf(stderr, "pfl partition: %s\n", pfl_errmsg());
        return 1;
    }
    pfl_dataset d = {0};
    pfl_partition p = {0};
    int rc = 0;
    const pfl_run_options say = {.quiet = o.quiet}; /* progress lines to stderr */
    if (pfl_run_load_partitioned(o.data, o.data_dir, o.partition, o.clients, o.seed, 0.75, 0, &say, &d, &p)) {
        fprintf(stderr, "pfl partition: %s\n", pfl_errmsg());
        return 1;
    }
    if (!o.quiet) {
        pfl_partition_spec spec;
        char about[512];
        pfl_partition_parse(&spec, pfl_partition_resolve(o.data, o.partition)); /* parsed once already */
        print_table(&d, &p, pfl_partition_describe(&spec, &d, o.clients, about, sizeof about));
    }
    if (o.save && save_partition(&o, &p)) {
        fprintf(stderr, "pfl partition: %s\n", pfl_errmsg());
        rc = 1;
    }
    if (rc == 0 && export_dir && export_pfllib(&o, &d, &p, export_dir)) {
        fprintf(stderr, "pfl partition: %s\n", pfl_errmsg());
        rc = 1;
    }
    if (rc == 0 && o.plot) {
        char title[512];
        snprintf(title, sizeof title, "%s, --partition %s, %d clients, seed %llu", o.data, o.partition, o.clients,
                 (unsigned long long)o.seed);
        if (pfl_plot_partition(&d, &p, title, o.plot)) {
            fprintf(stderr, "pfl partition: %s\n", pfl_errmsg());
            rc = 1;
        } else if (!o.quiet) {
            printf("wrote %s.png and %s.svg\n", o.plot, o.plot);
        }
    }
    pfl_partition_free(&p);
    pfl_dataset_free(&d);
    return rc;
}
