/* The experiment (run.h): data, partition, model and federation from the
 * run's options, the rounds, going on from a checkpoint, and a run of
 * several seeds. The outputs are output.c's; the seed list and the summary
 * over seeds, seeds.c's. */
#include <math.h>
#include <signal.h> /* SIGINT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h> /* access */

#include "algos/algos.h"
#include "nn/blas.h"
#include "run/folder.h"
#include "run/output.h"
#include "run/run.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_mkdirs */

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* ---- data ---- */

int pfl_run_load_partitioned(const char *data_name, const char *data_dir, const char *partition, int clients,
                             uint64_t seed, double train_fraction, int holdout, const pfl_run_options *o,
                             pfl_dataset *d, pfl_partition *p) {
    const pfl_run_options quiet = {.quiet = true};
    if (!o) o = &quiet;
    partition = pfl_partition_resolve(data_name, partition); /* a PFLlib folder's own clients */
    pfl_partition_spec spec;
    if (pfl_partition_parse(&spec, partition)) return -1;
    if (spec.kind == PFL_PART_PFLLIB && strncmp(data_name, "pfllib:", 7)) /* before minutes of loading */
        return pfl_err("--partition pfllib: takes the clients of a PFLlib folder (--data pfllib:DIR), not --data %s",
                       data_name);
    spec.train_fraction = train_fraction, spec.holdout = holdout;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (pfl_dataset_load(d, data_name, data_dir)) return -1;
    pfl_run_say(o, "[pfl] loaded %s from %s: %d samples, %dx%dx%d, %d classes (%.1f s)", d->name,
            d->own_clients ? data_name + 7 : data_dir, d->n, d->c, d->h, d->w, d->classes, seconds_since(&t0));
    if (d->provenance[0]) pfl_run_say(o, "[pfl] %s: %s", d->name, d->provenance);
    if (d->warning[0]) fprintf(stderr, "[pfl] warning: %s\n", d->warning); /* quiet or not: results may differ */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (pfl_partition_make(p, d, &spec, clients, seed)) {
        pfl_dataset_free(d);
        return -1;
    }
    pfl_run_say(o, "[pfl] partition %s over %d clients (%.2f s)", partition, clients, seconds_since(&t0));
    if (holdout) /* FedTSDP */
        pfl_run_say(o, "[pfl] samples %d..%d held out as the server's public set", d->n - holdout, d->n - 1);
    return 0;
}

/* --public as a sample count; "test" is the size of the original test
 * files, which the loaders put last (data.h). FedTSDP defaults to it. */
static int public_count(const pfl_run_options *o) {
    const char *p = o->public_set ? o->public_set : "0";
    if (!strcmp(p, "test")) {
        if (!strcmp(o->data, "mnist") || !strcmp(o->data, "fmnist") || !strcmp(o->data, "cifar10") ||
            !strcmp(o->data, "cifar100") || !strcmp(o->data, "cifar100-coarse") || !strcmp(o->data, "tinyimagenet"))
            return 10000;
        if (!strcmp(o->data, "svhn")) return 26032; /* test_32x32.mat */
        return pfl_err("--public test: the test-file size of %s is not known; give a count", o->data);
    }
    char *end;
    long v = strtol(p, &end, 10);
    if (*p == '\0' || *end != '\0' || v < 0 || v > 100000000)
        return pfl_err("--public '%s': expected a sample count or 'test'", p);
    return (int)v;
}

/* Text (agnews): the vocabulary, from the training clients' text only, with
 * as many ids as the model's embedding has rows. */
static int build_vocabulary(pfl_dataset *data, const pfl_partition *part, const pfl_model *model,
                            const pfl_run_options *o) {
    if (pfl_text_build_vocab(data, part, pfl_model_vocab(model))) return -1;
    if (data->text->given_ids) { /* a PFLlib folder: its ids are final */
        pfl_run_say(o, "[pfl] token ids as the folder holds them: the largest %d, within the model's %d",
                    data->text->num_words - 1, data->text->vocab_size);
        return 0;
    }
    pfl_run_say(o,
            "[pfl] vocabulary: %d ids (<pad> 0, <unk> 1, %d words of the %d distinct ones) from the training "
            "clients' text",
            data->text->vocab_size, data->text->vocab_words, data->text->num_words);
    return 0;
}

static int parse_bn(const char *s, pfl_bn_mode *mode) {
    if (!strcmp(s, "shared")) *mode = PFL_BN_SHARED;
    else if (!strcmp(s, "local")) *mode = PFL_BN_LOCAL;
    else if (!strcmp(s, "stats-local")) *mode = PFL_BN_STATS_LOCAL;
    else return pfl_err("--bn '%s': expected shared, local, stats-local or auto", s);
    return 0;
}

/* ---- the run ---- */

/* MPI: rank 0 alone writes the outputs (the others have no o->out). */
static bool writes_outputs(const pfl_run_options *o) {
    return !pfl_transport_distributed(o->cfg.transport) || o->cfg.transport->rank == 0;
}

/* --data pfllib:DIR without --clients: the folder's own clients (its
 * config.json), as its clients are the split; given, they must agree
 * (partition.c says so in one line). */
static int clients_from_folder(pfl_run_options *o) {
    if (!o->data || strncmp(o->data, "pfllib:", 7) || !o->data[7]) return 0;
    if (o->train_fraction_given) /* recorded but not applied would be a number that lies */
        return pfl_err("--train-fraction: the clients of a PFLlib folder come split already (its train/ and test/ "
                       "files); leave it out with --data pfllib:DIR");
    return o->clients_given ? 0 : pfl_pfllib_clients(o->data + 7, &o->cfg.clients);
}

/* What is checked before anything is loaded or written. */
static int check_options(pfl_run_options *o) {
    if (clients_from_folder(o)) return -1;
    if (o->checkpoint_every > 0 && !o->out && writes_outputs(o))
        return pfl_err("--checkpoint-every needs --out DIR (where it writes)");
    if (!(o->cfg.drop_rate < 1.0))
        return pfl_err("--drop-rate %g: must be below 1 (some client must be able to upload)", o->cfg.drop_rate);
    if (!pfl_model_known(o->model))
        return pfl_err("--model: unknown model '%s' (choose from %s)", o->model, pfl_model_choices());
    struct stat st;
    const char *state = o->cfg.client_state_dir;
    if (state && (stat(state, &st) != 0 || !S_ISDIR(st.st_mode) || access(state, W_OK) != 0))
        return pfl_err("--client-state %s: not a writable directory", state);
    return pfl_run_options_finish(o) || parse_bn(o->bn, &o->cfg.bn) ||
                   pfl_parse_semantics(&o->cfg, o->eval_moment, o->init_clients, o->step_budget)
               ? -1
               : 0;
}

/* The first line says what does the arithmetic: a slow BLAS must not go unseen. */
static void say_blas(const pfl_run_options *o) {
    if (o->quiet) return;
    char blas[128];
    pfl_blas_single_thread(); /* what every worker runs with (pfl_fl_create sets it again) */
    pfl_blas_describe(blas, sizeof blas);
    pfl_run_say(o, "[pfl] BLAS: %s, %d thread%s per worker, %d worker thread%s", blas, pfl_blas_threads(),
            pfl_blas_threads() == 1 ? "" : "s", o->cfg.threads, o->cfg.threads == 1 ? "" : "s");
}

/* A GPU run says which GPU and which CUDA (the CPU's line is the BLAS one). */
static void say_device(const pfl_run_options *o) {
    const pfl_backend *be = o->cfg.backend;
    if (o->quiet || !be || !be->describe) return;
    char what[320];
    be->describe(what, sizeof what);
    pfl_run_say(o, "[pfl] device: %s, %s, TF32 %s", be->name, what, pfl_backend_tf32() ? "on (--tf32)" : "off");
}

/* The model, saying why an image model cannot read text. */
static int build_model(pfl_model *model, const pfl_run_options *o, const pfl_dataset *data) {
    if (!pfl_model_build(model, o->model, data->c, data->h, data->w, data->classes)) return 0;
    if (data->text) {
        char why[256];
        snprintf(why, sizeof why, "%s", pfl_errmsg());
        pfl_err("--data %s is text (token ids), read by --model fasttext (%s)", data->name, why);
    }
    return -1;
}

/* After the last round's evaluation, or resumed from the checkpoint of the
 * last round (or of the round --auto-break stopped at): the fingerprint of
 * the clients' final models and ALA's start phase, which the round loop
 * computes only when it evaluates the last round itself. */
static int finish_models(pfl_fl *fl) {
    return pfl_fl_personal_digest(fl, fl->personal_sha256) || pfl_fl_sum_ala_start(fl) ? -1 : 0;
}

/* What a run builds before it trains, each step checking what it reads:
 * the data (and the public hold-out), its partition, the model (and a text
 * model's vocabulary), the federation. 0, or -1 with a message (what was
 * made is the caller's to free: run_experiment frees all four). */
static int prepare(pfl_run_options *o, const pfl_algo *algo, int *holdout, pfl_dataset *data, pfl_partition *part,
                   pfl_model *model, pfl_fl *fl) {
    if ((*holdout = public_count(o)) < 0) return -1;
    if (pfl_run_load_partitioned(o->data, o->data_dir, o->partition, o->cfg.clients, o->cfg.seed, o->train_fraction,
                                 *holdout, o, data, part) ||
        build_model(model, o, data))
        return -1;
    if (data->text && pfl_model_vocab(model) && build_vocabulary(data, part, model, o)) return -1;
    o->cfg.algo.tsdp_public = *holdout; /* FedTSDP */
    return pfl_fl_create(fl, &o->cfg, model, data, part, algo);
}

/* Run o's checks before training (prepare), without training: --seeds
 * --overwrite checks its first seed so before it replaces the old run. */
static int check_run(pfl_run_options *o, const pfl_algo *algo) {
    pfl_dataset data = {0};
    pfl_partition part = {0};
    pfl_model model;
    pfl_fl fl = {0};
    int holdout;
    const bool quiet = o->quiet;
    o->quiet = true; /* the run itself says what it loads */
    const int rc = prepare(o, algo, &holdout, &data, &part, &model, &fl);
    o->quiet = quiet;
    pfl_fl_destroy(&fl);
    pfl_partition_free(&part);
    pfl_dataset_free(&data);
    return rc;
}

/* A new run's first files in o->out: with checkpoints one of the flags
 * alone, then metrics.jsonl. In that order a run killed at any moment is
 * either resumable (its checkpoint committed) or no run at all (only a
 * temporary file, which the next pfl run into the folder is free to
 * replace), never a metrics.jsonl without a checkpoint. */
static int start_outputs(run_report *report) {
    const pfl_run_options *o = report->o;
    if (o->checkpoint_every > 0 && pfl_run_write_start_checkpoint(report)) return -1;
    return (report->metrics = pfl_run_open_metrics(o->out)) ? 0 : -1;
}

/* The run o describes (checked: check_options), into o->out when it is set
 * (`folder`: the folder, locked; NULL when the caller holds it or there is
 * none), from the start or from the checkpoint `resume`. */
static int run_experiment(pfl_run_options *o, const pfl_algo *algo, pfl_ckpt_reader *resume, run_folder *folder) {
    pfl_dataset data = {0};
    pfl_partition part = {0};
    pfl_model model;
    pfl_fl fl = {0};
    run_report report;
    int rc = -1;
    if (pfl_run_report_init(&report, o)) return -1;
    report.folder = folder;
    if (o->checkpoint_every > 0 && !(report.flags = pfl_run_flags(o, &report.flags_len))) goto done;
    /* Fail on an unwritable --out before spending minutes on data and training
     * (resuming touches the outputs only once the checkpoint has loaded). A run
     * that replaces another (--overwrite) opens its files only once it has
     * checked all it can, below: the folder took a file already (claim). */
    const bool replacing = folder && folder->replace;
    if (o->out && !resume && !replacing && start_outputs(&report)) goto done;
    say_device(o);
    say_blas(o);
    if (prepare(o, algo, &report.holdout, &data, &part, &model, &fl)) goto done;
    if (replacing && (pfl_run_folder_replace(folder) || start_outputs(&report))) goto done;
    if (resume) {
        if (pfl_fl_load(&fl, resume) || pfl_run_load_report(resume, &report)) goto done;
        if (o->out && !(report.metrics = pfl_run_reopen_metrics(&report, resume, fl.round))) goto done;
        pfl_run_say(o, "[pfl] resuming %s after round %d of %d", resume->path, fl.round, o->cfg.rounds);
    }
    if (pfl_transport_distributed(o->cfg.transport)) /* MPI */
        pfl_run_say(o, "[pfl] mpi: %d processes, rank 0 the server, %d threads per rank", o->cfg.transport->size,
                o->cfg.threads);
    pfl_run_say(o, "[pfl] %s on %s, model %s (%zu parameters), %d clients, join %g, %d rounds, %d threads", algo->name,
            data.name, model.name, fl.model->num_params, o->cfg.clients, o->cfg.join, o->cfg.rounds, o->cfg.threads);
    /* resumed from the checkpoint of the round --auto-break stopped at: nothing left to train (rank 0, which
     * read the evaluations back from metrics.jsonl, decides for every rank) */
    int stopped = resume && fl.round < o->cfg.rounds && pfl_run_should_stop_early(&report);
    if (pfl_transport_share(o->cfg.transport, &stopped, sizeof stopped, 0)) goto done;
    report.stopped_early = stopped;
    const bool trained_before = resume && fl.round == o->cfg.rounds; /* killed before its summary was written */
    if (!report.stopped_early && !trained_before &&
        pfl_fl_run_with(&fl, pfl_run_on_round, pfl_run_after_round, &report))
        goto done;
    /* rank 0 watched the losses; every rank takes the same way out */
    if (pfl_transport_share(o->cfg.transport, &report.diverged_round, sizeof report.diverged_round, 0)) goto done;
    const bool diverged = report.diverged_round && !o->allow_divergence && fl.round < o->cfg.rounds;
    if (report.stopped_early || trained_before || diverged) { /* the last evaluation's models are the final ones (MPI: collective) */
        if (finish_models(&fl)) goto done;
    } else if (fl.round < o->cfg.rounds && fl.stop_signal) { /* its checkpoint is written */
        pfl_run_say(o, "[pfl] %s: stopped after round %d with its checkpoint: pfl resume %s goes on",
                    fl.stop_signal == SIGINT ? "SIGINT" : "SIGTERM", fl.round, o->out ? o->out : "DIR");
        rc = 0;
        goto done;
    } else if (fl.round < o->cfg.rounds) { /* --stop-after: no summary, as after a crash */
        pfl_run_say(o, "[pfl] stopped after round %d (--stop-after)", fl.round);
        rc = 0;
        goto done;
    }
    if (pfl_transport_traffic(o->cfg.transport, &report.traffic) || /* MPI: every rank takes part in both */
        pfl_run_measure_memory(&fl, &report))
        goto done;
    /* every metrics line on disk before the summary says the run is complete */
    if (report.metrics && pfl_run_close_metrics(&report)) goto done;
    if (o->out && pfl_run_write_summary(&fl, &report)) goto done;
    pfl_run_say_done(&fl, &report);
    rc = 0;
    if (report.diverged_round && !o->allow_divergence) {
        pfl_err("diverged at round %d: its training loss or global model is not finite (NaN or inf)%s; lower --lr, or "
                "--allow-divergence runs on", report.diverged_round, o->out ? ", as summary.json says" : "");
        rc = PFL_RUN_DIVERGED;
    }
done:
    if (report.metrics && rc == 0) rc = pfl_run_close_metrics(&report); /* --stop-after: checked too */
    else if (report.metrics) fclose(report.metrics); /* the run's own failure is the message */
    free(report.flags);
    free(report.evals);
    pfl_fl_destroy(&fl);
    pfl_partition_free(&part);
    pfl_dataset_free(&data);
    return rc;
}

/* A new run into o->out: the folder locked and claimed (refused when it
 * holds another run, unless --overwrite), and on failure left as it was
 * found, or holding a run pfl resume can go on with. */
static int run_new(pfl_run_options *o, const pfl_algo *algo) {
    run_folder folder;
    if (pfl_run_folder_lock(&folder, o->out, true)) return -1;
    if (pfl_run_folder_claim(&folder, o->overwrite)) {
        pfl_run_folder_unlock(&folder);
        return -1;
    }
    const int rc = run_experiment(o, algo, NULL, &folder);
    if (rc && rc != PFL_RUN_DIVERGED) pfl_run_folder_discard(&folder); /* a diverged run's summary says so */
    pfl_run_folder_unlock(&folder);
    return rc;
}

int pfl_run(pfl_run_options *o, pfl_ckpt_reader *resume) {
    if (o->seeds && !resume) return pfl_run_seeds(o, NULL);
    const pfl_algo *algo = pfl_algo_find(o->algo);
    if (!algo || check_options(o)) return -1;
    return o->out && !resume ? run_new(o, algo) : run_experiment(o, algo, resume, NULL);
}

/* ---- going on from a checkpoint ---- */

/* The stored flags as an argv (malloc'd): the strings of `flags` (each NUL-ended). */
static char **split_flags(char *flags, size_t len, int *argc) {
    int n = 0;
    for (size_t i = 0; i < len; i += strlen(flags + i) + 1) n++;
    char **argv = pfl_malloc(sizeof(char *) * (size_t)(n + 1));
    if (!argv) return NULL;
    *argc = 0;
    for (size_t i = 0; i < len; i += strlen(flags + i) + 1) argv[(*argc)++] = flags + i;
    return argv;
}

/* A checkpoint names its run by every flag it had (pfl_run_flags), --algo
 * first: a list without --algo, or an empty one, would silently run with
 * this pfl's defaults, so it is refused. */
static int check_stored_flags(char **argv, int argc) {
    if (argc == 0) return pfl_err("none (a checkpoint pfl wrote lists every flag of its run)");
    for (int i = 0; i < argc; i++)
        if (!strncmp(argv[i], "--algo=", 7)) return 0;
    return pfl_err("no --algo among %d (a checkpoint pfl wrote lists every flag of its run)", argc);
}

/* Goes on with the run of the locked folder `dir` from its checkpoint rd. */
static int resume_from(pfl_ckpt_reader *rd, const char *dir, const pfl_resume_options *r) {
    char *flags = NULL, **argv = NULL;
    uint64_t len = 0;
    int rc = -1, argc = 0;
    if (pfl_ckpt_length(rd, "cli.flags", &len) || !(flags = pfl_malloc((size_t)len + 1)) ||
        pfl_ckpt_get(rd, "cli.flags", flags, (size_t)len))
        goto done;
    flags[len] = '\0';
    pfl_run_options o;
    if (!(argv = split_flags(flags, (size_t)len, &argc)) || check_stored_flags(argv, argc) ||
        pfl_run_options_parse(&o, argc, argv, true)) {
        char why[512]; /* the message is rewritten around itself: copy it first */
        snprintf(why, sizeof why, "%s", pfl_errmsg());
        pfl_err("%s: stored flags: %s", rd->path, why);
        goto done;
    }
    o.cfg.transport = r->transport;
    o.out = writes_outputs(&o) ? dir : NULL; /* MPI: rank 0 writes */
    if (r->threads > 0) o.cfg.threads = r->threads;
    if (r->data_dir) o.data_dir = r->data_dir;
    o.quiet |= r->quiet || !o.out;
    o.stop_after = r->stop_after; /* the stop of the interrupted invocation is not this one's */
    o.cfg.allow_data_change = r->allow_data_change;
    o.progress = r->progress, o.progress_ctx = r->progress_ctx;
    const pfl_algo *algo = pfl_algo_find(o.algo);
    if (o.seeds) /* several seeds: this checkpoint holds the whole run's flags, each seed its own */
        rc = pfl_run_seeds(&o, r);
    else if (!algo || check_options(&o))
        rc = -1;
    else /* killed before round 0's checkpoint: the run starts over */
        rc = run_experiment(&o, algo, pfl_ckpt_has(rd, "cli.not_started") ? NULL : rd, NULL);
done:
    free(argv);
    free(flags);
    return rc;
}

/* DIR/checkpoint is the run's own file: a symbolic link there is refused
 * before it is read (the next checkpoint could not be written through it,
 * after a round trained and appended for nothing); none at all is a run
 * stopped before its first checkpoint, which starts over with pfl run. */
static int own_checkpoint(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return pfl_err("%s: %s", path,
                       errno == ENOENT ? "no checkpoint (the run stopped before its first one: run it again with "
                                         "pfl run, or it was not written with --checkpoint-every)"
                                       : strerror(errno));
    if (S_ISLNK(st.st_mode))
        return pfl_err("%s: a symbolic link: pfl resumes from a run's own checkpoint file only", path);
    return 0;
}

/* Under mpirun rank 0 owns the folder: it locks it, tidies what a crash
 * left and says for every rank whether the run finished (1), goes on (0)
 * or cannot (-1); every rank then reads the checkpoint. */
int pfl_run_resume(const char *dir, const pfl_resume_options *r) {
    const bool owner = !pfl_transport_distributed(r->transport) || r->transport->rank == 0;
    run_folder folder = {.lock_fd = -1};
    int state = 0;
    if (owner) {
        if (pfl_run_folder_lock(&folder, dir, false)) state = -1;
        else if (pfl_run_folder_finished(dir)) state = 1;
        else pfl_run_folder_remove_temporaries(dir); /* what a crash cut short beside a good checkpoint */
    }
    if (pfl_transport_share(r->transport, &state, sizeof state, 0)) state = -1;
    else if (state < 0 && !owner) pfl_err("%s: rank 0 could not take the folder", dir);
    int rc = state;
    if (state == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/checkpoint", dir);
        pfl_ckpt_reader rd;
        rc = own_checkpoint(path) || pfl_ckpt_open(&rd, path) ? -1 : 0;
        if (rc == 0) {
            rc = resume_from(&rd, dir, r);
            pfl_ckpt_close(&rd);
        }
    }
    pfl_run_folder_unlock(&folder);
    return rc;
}

/* ---- several seeds (pfl_run_seeds: the list and the summary are seeds.c's) ---- */

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The whole run's flags, --seeds and --out included, in DIR/checkpoint:
 * pfl resume DIR finds them there (each seed's checkpoint is its own). */
static int write_seeds_checkpoint(const pfl_run_options *o) {
    size_t len;
    char *flags = pfl_run_flags(o, &len);
    if (!flags) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoint", o->out);
    pfl_ckpt_writer w;
    int rc = pfl_mkdirs(o->out) || pfl_ckpt_begin(&w, path) ? -1 : 0;
    if (rc == 0 && (pfl_ckpt_put(&w, "cli.flags", flags, len) || pfl_ckpt_put_int(&w, "cli.seeds", 1))) {
        pfl_ckpt_abort(&w);
        rc = -1;
    } else if (rc == 0) {
        rc = pfl_ckpt_commit(&w);
    }
    free(flags);
    return rc;
}

int pfl_run_seeds(pfl_run_options *o, const pfl_resume_options *resume) {
    uint64_t *seeds;
    int n;
    if (o->checkpoint_every > 0 && pfl_transport_distributed(o->cfg.transport))
        return pfl_err("--seeds with checkpoints does not run under mpirun: run each seed as a run of its own "
                       "(--seed N --out DIR/seed-N)");
    if (!o->seeds || pfl_parse_seeds(o->seeds, &seeds, &n)) return o->seeds ? -1 : pfl_err("--seeds: none given");
    if (clients_from_folder(o)) { /* before the flags are stored: a resume reads the folder's count */
        free(seeds);
        return -1;
    }
    int rc = -1;
    run_folder folder = {.lock_fd = -1};
    if (o->checkpoint_every > 0 && !o->out) {
        pfl_err("--checkpoint-every needs --out DIR (where it writes)");
        goto done;
    }
    /* a new run owns the whole folder (pfl_run_resume holds it when resuming) */
    if (o->out && !resume && pfl_run_folder_lock(&folder, o->out, true)) goto done;
    if (o->out && !resume && pfl_run_folder_claim(&folder, o->overwrite)) goto done;
    if (folder.replace) { /* --overwrite: the old run goes once the first seed's run has passed its checks */
        pfl_run_options first = *o;
        first.seeds = NULL, first.cfg.seed = seeds[0];
        const pfl_algo *algo = pfl_algo_find(o->algo);
        if (!algo || check_options(&first) || check_run(&first, algo) || pfl_run_folder_replace(&folder)) goto done;
    }
    if (o->out && !resume && o->checkpoint_every > 0 && write_seeds_checkpoint(o)) goto done;
    char dir[4096], path[4200];
    for (int i = 0; i < n; i++) {
        pfl_run_options one = *o;
        one.seeds = NULL, one.cfg.seed = seeds[i];
        one.overwrite = true; /* what a seed's folder holds is this run's: an interrupted seed starts over */
        if (o->out) {
            if (snprintf(dir, sizeof dir, "%s/seed-%llu", o->out, (unsigned long long)seeds[i]) >= (int)sizeof dir) {
                pfl_err("%s: path too long", o->out);
                goto done;
            }
            one.out = dir;
            snprintf(path, sizeof path, "%s/summary.json", dir);
            if (resume && file_exists(path)) {
                pfl_run_say(o, "[pfl] seed %llu (%d of %d): done before, %s", (unsigned long long)seeds[i], i + 1, n, path);
                continue;
            }
        }
        pfl_run_say(o, "[pfl] seed %llu (%d of %d)%s%s", (unsigned long long)seeds[i], i + 1, n, o->out ? " into " : "",
                o->out ? dir : "");
        if (o->out) snprintf(path, sizeof path, "%s/checkpoint", dir);
        if (o->out && resume && file_exists(path)) {
            const int seed_rc = pfl_run_resume(dir, resume);
            if (seed_rc < 0 || seed_rc == PFL_RUN_DIVERGED) {
                rc = seed_rc;
                goto done;
            }
        } else if ((rc = pfl_run(&one, NULL)) != 0) {
            if (rc != PFL_RUN_DIVERGED) rc = -1; /* a diverged seed ends the run as it ends itself */
            goto done;
        }
        rc = -1;
        if (o->out) snprintf(path, sizeof path, "%s/summary.json", dir);
        if (o->out && !file_exists(path)) { /* --stop-after: the whole run stops there, as after a crash */
            rc = 0;
            goto done;
        }
    }
    rc = o->out ? pfl_seeds_summarize(o->out, seeds, n) : 0;
    if (rc == 0 && o->out) pfl_run_say(o, "[pfl] wrote %s/summary.json over %d seeds", o->out, n);
done:
    pfl_run_folder_unlock(&folder); /* removes the folder a failed run made, when empty */
    free(seeds);
    return rc;
}
