/* The outputs of a run (output.h): progress lines, metrics.jsonl,
 * summary.json, and the sections of the checkpoint that are the run's own
 * (its flags and report). What a method or a module adds to them comes
 * from its report hook (util/report.h); nothing here knows a method. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h> /* getrusage: the summary's peak resident memory */
#include <time.h>

#include <jansson.h> /* reading metrics.jsonl back on resuming */

#include "nn/blas.h"
#include "run/output.h"
#include "util/err.h"
#include "util/json.h"
#include "util/safe_write.h"
#include "util/sha256.h"

/* ---- progress lines ---- */

/* Hands each line of text[0..len) to the run's progress callback, or
 * stderr. */
static void emit_lines(const pfl_run_options *o, const char *text, size_t len) {
    while (len > 0) {
        const char *nl = memchr(text, '\n', len);
        const size_t n = nl ? (size_t)(nl - text) : len;
        if (o->progress) {
            char *line = malloc(n + 1);
            if (line) {
                memcpy(line, text, n);
                line[n] = '\0';
                o->progress(line, o->progress_ctx);
                free(line);
            }
        } else {
            fprintf(stderr, "%.*s\n", (int)n, text);
        }
        text += n + (nl ? 1 : 0), len -= n + (nl ? 1 : 0);
    }
}

/* A line (or several) built piece by piece with stdio into memory, then
 * emitted whole: report hooks write to a FILE. */
typedef struct {
    FILE *f;
    char *text;
    size_t len;
} line_buffer;

static FILE *line_open(line_buffer *l) {
    l->text = NULL, l->len = 0;
    return l->f = open_memstream(&l->text, &l->len);
}

static void line_emit(const pfl_run_options *o, line_buffer *l) {
    if (!l->f) return;
    fclose(l->f);
    emit_lines(o, l->text, l->len);
    free(l->text);
}

void pfl_run_say(const pfl_run_options *o, const char *fmt, ...) {
    if (o->quiet) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    emit_lines(o, buf, strlen(buf));
}

/* The method's report, then every module's that is on. */
static void report_all(const pfl_fl *fl, FILE *f, int what) {
    if (fl->algo->report) fl->algo->report(fl, f, what);
    for (int k = 0; pfl_modules[k]; k++) {
        const pfl_module *m = pfl_modules[k];
        if (!m->report || !pfl_module_on(m, &fl->cfg.modules, fl->algo->modules)) continue;
        const pfl_module_view v = {fl->model, &fl->cfg.modules, &fl->cfg.algo, fl->cfg.clients,
                                   fl->ala_started ? &fl->ala_start : NULL};
        m->report(&v, f, what);
    }
}

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void format_duration(char *buf, size_t n, double s) {
    if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* ---- metrics.jsonl ---- */

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The clients left behind: the mean of the ceil(n/10) lowest per-client
 * accuracies (at least one client; clients without test samples are not
 * counted, as in local_acc_mean), and the lowest. NAN without clients. */
static void client_tail(const double *acc, int clients, double *p10, double *min) {
    *p10 = *min = NAN;
    double *sorted = malloc(sizeof(double) * (size_t)(clients > 0 ? clients : 1));
    if (!acc || !sorted) {
        free(sorted);
        return;
    }
    int n = 0;
    for (int c = 0; c < clients; c++)
        if (isfinite(acc[c])) sorted[n++] = acc[c];
    if (n > 0) {
        qsort(sorted, (size_t)n, sizeof(double), compare_doubles);
        const int k = (n + 9) / 10;
        double sum = 0.0;
        for (int i = 0; i < k; i++) sum += sorted[i];
        *p10 = sum / k, *min = sorted[0];
    }
    free(sorted);
}

static void format_metrics_line(FILE *f, const pfl_round_metrics *m, const pfl_fl *fl, const run_eval *e) {
    fprintf(f, "{\"round\":%d,\"local_acc\":", m->round);
    pfl_json_number(f, m->local_acc);
    fputs(",\"local_acc_mean\":", f);
    pfl_json_number(f, m->local_acc_mean);
    fputs(",\"local_acc_std\":", f);
    pfl_json_number(f, m->local_acc_std);
    fputs(",\"local_acc_joined\":", f), pfl_json_number(f, m->local_acc_joined); /* FedALA's rho = 0.5* */
    fputs(",\"local_acc_p10\":", f), pfl_json_number(f, e->p10); /* the clients left behind */
    fputs(",\"local_acc_min\":", f), pfl_json_number(f, e->min);
    fputs(",\"global_acc\":", f);
    pfl_json_number(f, m->global_acc);
    fputs(",\"train_loss\":", f);
    pfl_json_number(f, m->train_loss);
    fputs(",\"seconds\":", f);
    pfl_json_number(f, m->seconds);
    fputs(",\"eval_seconds\":", f);
    pfl_json_number(f, m->eval_seconds);
    fprintf(f, ",\"train_samples\":%ld,\"clients\":%d", m->train_samples, m->selected);
    /* the messages of the round as the method defines them (pfl_algo.message_bytes) */
    fprintf(f, ",\"bytes_down\":%llu,\"bytes_up\":%llu", (unsigned long long)m->bytes_down,
            (unsigned long long)m->bytes_up);
    if (fl->cfg.drop_rate > 0.0) { /* --drop-rate: who was selected but never uploaded */
        fputs(",\"dropped\":[", f);
        for (int k = 0; k < m->dropped; k++) fprintf(f, "%s%d", k ? "," : "", m->dropped_clients[k]);
        fputc(']', f);
    }
    report_all(fl, f, PFL_REPORT_METRICS);
    /* last, being long: every client's personalized accuracy, so fairness can be computed later */
    fputs(",\"client_acc\":[", f);
    for (int c = 0; m->client_acc && c < fl->cfg.clients; c++) {
        if (c) fputc(',', f);
        pfl_json_number(f, m->client_acc[c]);
    }
    fputs("]}\n", f);
}

static void metrics_path(const run_report *r, char *path, size_t size) {
    snprintf(path, size, "%s/metrics.jsonl", r->o->out);
}

/* Appends text to metrics.jsonl, flushed, and to the digest of its bytes;
 * a failure stops the run after the round (pfl_run_after_round). */
static void append_metrics(run_report *r, const char *text, size_t len) {
    char path[4200];
    metrics_path(r, path, sizeof path);
    if (fwrite(text, 1, len, r->metrics) != len) { /* the reason, while errno still holds it */
        r->write_failed = true;
        pfl_err("%s: write failed: %s", path, strerror(errno));
        return;
    }
    if (pfl_stream_flush(r->metrics, path, false)) {
        r->write_failed = true;
        return;
    }
    pfl_sha256_update(&r->metrics_sha, text, len);
    r->metrics_bytes += len;
}

/* The round's line, built whole in memory, then appended. */
static void write_metrics_line(run_report *r, const pfl_round_metrics *m, const pfl_fl *fl, const run_eval *e) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f) format_metrics_line(f, m, fl, e);
    if (!f || fclose(f) != 0 || !text) {
        r->write_failed = true;
        pfl_err("%s/metrics.jsonl: out of memory formatting a line", r->o->out);
    } else {
        append_metrics(r, text, len);
    }
    free(text);
}

/* Evaluated rounds among 0..round: 0, every eval_every-th, and the last. */
static int evaluated_rounds(int round, int eval_every, int rounds) {
    return 1 + round / eval_every + (round == rounds && rounds % eval_every != 0 ? 1 : 0);
}

int pfl_run_report_init(run_report *r, const pfl_run_options *o) {
    memset(r, 0, sizeof *r);
    r->o = o, r->best_local = NAN, r->best_global = NAN;
    pfl_sha256_init(&r->metrics_sha);
    r->cap_evals = evaluated_rounds(o->cfg.rounds, o->cfg.eval_every, o->cfg.rounds);
    return (r->evals = pfl_malloc(sizeof(run_eval) * (size_t)r->cap_evals)) ? 0 : -1;
}

/* Keeps an evaluation for what needs them all (run_eval); room for every
 * evaluation the run can make was taken at the start. */
static void remember_eval(run_report *r, const run_eval *e) {
    if (r->num_evals < r->cap_evals) r->evals[r->num_evals++] = *e;
}

/* --drop-rate: "  (2 dropped)" on the progress line of a round. */
static void print_dropped(FILE *f, const pfl_round_metrics *m, const pfl_fl *fl) {
    if (fl->cfg.drop_rate > 0.0 && m->round > 0) fprintf(f, "  (%d dropped)", m->dropped);
}

/* Why a round diverged: its training loss (over the clients that trained)
 * or its global model is not finite; NULL when neither. */
static const char *divergence(const pfl_round_metrics *m, const pfl_fl *fl) {
    if (m->train_samples > 0 && !isfinite(m->train_loss)) return "its training loss is not finite";
    if (!fl->algo->has_global) return NULL;
    for (size_t i = 0; i < fl->model->num_params; i++)
        if (!isfinite(fl->global[i])) return "its global model holds NaN or inf";
    return NULL;
}

void pfl_run_on_round(const pfl_round_metrics *m, const pfl_fl *fl, void *ctx) {
    run_report *r = ctx;
    const char *why = m->round > 0 && !r->diverged_round ? divergence(m, fl) : NULL;
    if (why) {
        r->diverged_round = m->round;
        pfl_run_say(r->o, "[pfl] round %d diverged: %s%s", m->round, why,
                    r->o->allow_divergence ? " (--allow-divergence: going on)" : "; the run stops after it");
    }
    if (m->round == 0) r->started = monotonic_seconds() - m->eval_seconds;
    r->elapsed = monotonic_seconds() - r->started;
    const int R = fl->cfg.rounds;
    char eta[32] = "-";
    if (m->round > 0) format_duration(eta, sizeof eta, (r->elapsed / m->round) * (R - m->round));
    line_buffer l;
    if (!m->evaluated) {
        if (!r->o->quiet && line_open(&l)) {
            fprintf(l.f, "[pfl] round %d/%d  trained %d clients", m->round, R, m->selected);
            print_dropped(l.f, m, fl);
            fprintf(l.f, "  loss %.4f  %.1fs  ETA %s", m->train_loss, m->seconds, eta);
            line_emit(r->o, &l);
        }
        return;
    }
    if (m->round > 0) {
        if (!(m->local_acc <= r->best_local)) r->best_local = m->local_acc, r->best_local_round = m->round;
        if (!(m->global_acc <= r->best_global) && isfinite(m->global_acc))
            r->best_global = m->global_acc, r->best_global_round = m->round;
    }
    r->final_local = m->local_acc, r->final_global = m->global_acc;
    r->final_local_mean = m->local_acc_mean, r->final_local_std = m->local_acc_std;
    run_eval e = {.round = m->round, .local = m->local_acc, .global = m->global_acc};
    client_tail(m->client_acc, fl->cfg.clients, &e.p10, &e.min);
    remember_eval(r, &e);
    if (r->metrics && !r->write_failed) write_metrics_line(r, m, fl, &e);
    if (r->o->quiet || !line_open(&l)) return;
    fprintf(l.f, "[pfl] round %*d/%d  local %.4f (mean %.4f, std %.4f)  global ", m->round < 10 ? 1 : 0, m->round, R,
            m->local_acc, m->local_acc_mean, m->local_acc_std);
    if (isfinite(m->global_acc)) fprintf(l.f, "%.4f", m->global_acc);
    else fputs("  -   ", l.f);
    if (isfinite(m->train_loss)) fprintf(l.f, "  loss %.4f", m->train_loss);
    report_all(fl, l.f, PFL_REPORT_TEXT);
    print_dropped(l.f, m, fl);
    fprintf(l.f, "  %.1fs+%.1fs eval  ETA %s", m->seconds, m->eval_seconds, eta);
    line_emit(r->o, &l);
}

/* ---- summary.json ---- */

/* How the uploads meet under MPI (a reduction, or a gather for methods
 * that read each upload), the processes, and the payload bytes that moved
 * per round this process ran: to the server (rank 0), to the client ranks
 * together and to the one that received most; and per evaluation this
 * process ran, in the evaluation's sums of correct counts. Each is a mean
 * over what this process ran, so a resumed run says what an uninterrupted
 * one does (a total over the resumed rounds alone would not). */
static void write_transport_fields(FILE *f, const pfl_run_options *o, const pfl_fl *fl, const run_report *r) {
    const int processes = o->cfg.transport ? o->cfg.transport->size : 1;
    fprintf(f, ",\n  \"aggregation\": \"%s\",\n  \"processes\": %d", pfl_fl_aggregation(fl), processes);
    if (processes < 2) return;
    const double rounds = fl->rounds_run > 0 ? fl->rounds_run : 1;
    fprintf(f, ",\n  \"bytes_to_server_per_round\": %.0f,\n  \"bytes_to_client_ranks_per_round\": %.0f",
            (double)r->traffic.to_server / rounds, (double)r->traffic.to_clients / rounds);
    fprintf(f, ",\n  \"bytes_to_a_client_rank_per_round\": %.0f", (double)r->traffic.to_client_max / rounds);
    const int evals = r->num_evals - r->evals_resumed;
    fprintf(f, ",\n  \"bytes_evaluation_sums_per_evaluation\": %.0f",
            (double)r->traffic.eval / (evals > 0 ? evals : 1));
}

int pfl_run_measure_memory(const pfl_fl *fl, run_report *r) {
    pfl_transport *t = fl->cfg.transport;
    const int P = pfl_transport_distributed(t) ? t->size : 1, me = P > 1 ? t->rank : 0;
    long *v = pfl_calloc((size_t)P + 1, sizeof(long));
    if (!v) return -1;
    struct rusage ru;
    v[me] = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss * 1024L : 0; /* KiB on Linux */
    v[P] = (long)pfl_fl_state_bytes(fl);
    const int rc = pfl_transport_sum_longs(t, v, (size_t)P + 1);
    r->peak_rss = 0;
    for (int k = 0; k < P; k++) r->peak_rss = v[k] > r->peak_rss ? v[k] : r->peak_rss;
    r->state_bytes = v[P];
    free(v);
    return rc;
}

/* Memory: the peak resident memory, the client stores' bytes, and
 * where they were kept when not in memory. */
static void write_memory_fields(FILE *f, const pfl_run_options *o, const run_report *r) {
    fprintf(f, ",\n  \"peak_rss_bytes\": %ld,\n  \"client_state_bytes\": %ld", r->peak_rss, r->state_bytes);
    if (o->cfg.client_state_dir) fputs(",\n  \"client_state\": ", f), pfl_json_string(f, o->cfg.client_state_dir);
}

/* The BLAS and the kernels it ran: runs are bit-identical for any thread or
 * process count, but not across BLAS kernels (OpenBLAS's Haswell and
 * SkylakeX kernels round differently), so a fingerprint is read beside this. */
static void write_blas_field(FILE *f) {
    char blas[128];
    pfl_blas_describe(blas, sizeof blas);
    fputs(",\n  \"blas\": ", f), pfl_json_string(f, blas);
}

/* The parameters of the method and of the modules that are on, from their
 * tables (the common ones are written by name, in write_summary_fields). */
typedef struct {
    FILE *f;
    pfl_param_blocks b;
} param_writer;

static void write_param(const pfl_param *p, int table, void *ctx) {
    if (table == PFL_RUN_COMMON) return;
    param_writer *w = ctx;
    char key[64];
    pfl_param_key(p, key, sizeof key);
    fprintf(w->f, ",\n  \"%s\": ", key);
    pfl_param_json(p, &w->b, w->f);
    /* a layer count given as names or in another unit: also the number the
     * method read (rows; pFedCFR's r in units) */
    const pfl_run_options *o = w->b.at[PFL_BLOCK_RUN];
    const char *given = p->layers ? pfl_layer_spec(w->b.layer_specs, p->name) : NULL;
    if (given && (!pfl_selection_is_count(given) || (o->layer_unit && strcmp(o->layer_unit, "rows")))) {
        char value[64];
        pfl_param_blocks numbers = w->b;
        numbers.layer_specs = NULL; /* the number, not the text */
        if (pfl_param_format(p, &numbers, false, value, sizeof value)) fprintf(w->f, ",\n  \"%s_resolved\": %s", key, value);
    }
}

static void write_param_fields(FILE *f, const pfl_run_options *o) {
    param_writer w = {f, pfl_run_blocks(o)};
    pfl_run_each_param(o, write_param, &w);
}

/* The first evaluated round (1..R) within 0.5 points of the best: the
 * "iterations to convergence" of FedALA's Table 3 and FLAYER's Table 3.
 * `global` picks global_acc. -1 when there is no best. The 1e-9 absorbs
 * the rounding of accuracies read back from metrics.jsonl on resuming (10
 * digits): accuracies share one denominator (the test samples), so no
 * other difference lies that close to 0.005. */
static int converged_round(const run_report *r, bool global, double best) {
    if (!isfinite(best)) return -1;
    for (int i = 0; i < r->num_evals; i++) {
        const double acc = global ? r->evals[i].global : r->evals[i].local;
        if (r->evals[i].round > 0 && acc >= best - 0.005 - 1e-9) return r->evals[i].round;
    }
    return -1;
}

static void write_round_or_null(FILE *f, const char *key, int round) {
    if (round < 0) fprintf(f, ",\n  \"%s\": null", key);
    else fprintf(f, ",\n  \"%s\": %d", key, round);
}

/* The clients left behind at the last evaluation, rounds to convergence,
 * and whether --auto-break ended the run early. */
static void write_convergence_fields(FILE *f, const pfl_fl *fl, const run_report *r) {
    const run_eval *last = r->num_evals ? &r->evals[r->num_evals - 1] : NULL;
    fputs(",\n  \"final_local_acc_p10\": ", f), pfl_json_number(f, last ? last->p10 : NAN);
    fputs(",\n  \"final_local_acc_min\": ", f), pfl_json_number(f, last ? last->min : NAN);
    write_round_or_null(f, "converged_local_round", converged_round(r, false, r->best_local));
    write_round_or_null(f, "converged_global_round", converged_round(r, true, r->best_global));
    fprintf(f, ",\n  \"auto_break\": %s", r->o->auto_break ? "true" : "false");
    if (r->o->auto_break) fprintf(f, ",\n  \"top_cnt\": %d", r->o->top_cnt);
    fprintf(f, ",\n  \"stopped_early\": %s,\n  \"rounds_run\": %d", r->stopped_early ? "true" : "false", fl->round);
    if (r->diverged_round) fprintf(f, ",\n  \"diverged_round\": %d", r->diverged_round);
    else fputs(",\n  \"diverged_round\": null", f);
}

static void write_summary_fields(FILE *f, const pfl_run_options *o, const pfl_fl *fl, const run_report *r) {
    char sha[65];
    pfl_sha256_floats_hex(fl->global, pfl_model_vector_len(fl->model), sha); /* parameters and running statistics */
    fputs("{\n  \"algo\": ", f), pfl_json_string(f, o->algo);
    fputs(",\n  \"data\": ", f), pfl_json_string(f, o->data);
    fputs(",\n  \"model\": ", f), pfl_json_string(f, o->model);
    fputs(",\n  \"partition\": ", f), pfl_json_string(f, o->partition);
    fprintf(f, ",\n  \"clients\": %d,\n  \"join\": %g,\n  \"rounds\": %d,\n  \"epochs\": %d,\n  \"batch\": %d", o->cfg.clients,
            o->cfg.join, o->cfg.rounds, o->cfg.epochs, o->cfg.batch);
    fprintf(f, ",\n  \"lr\": %g,\n  \"momentum\": %g,\n  \"weight_decay\": %g", o->cfg.lr, o->cfg.momentum, o->cfg.weight_decay);
    fprintf(f, ",\n  \"seed\": %llu,\n  \"threads\": %d,\n  \"eval_every\": %d,\n  \"params\": %zu",
            (unsigned long long)o->cfg.seed, o->cfg.threads, o->cfg.eval_every, fl->model->num_params);
    fprintf(f, ",\n  \"state\": %zu", fl->model->num_state); /* BatchNorm running statistics */
    if (fl->model->num_state) fputs(",\n  \"bn\": ", f), pfl_json_string(f, o->bn);
    const pfl_modules_config *mod = &fl->cfg.modules;
    fprintf(f, ",\n  \"modules\": {\"ala\": %s, \"flayer_agg\": %s, \"flayer_lr\": %s, \"flayer_mask\": %s, "
               "\"flayer_mask_literal\": %s}",
            mod->ala ? "true" : "false", mod->flayer_agg ? "true" : "false", mod->flayer_lr ? "true" : "false",
            mod->flayer_mask ? "true" : "false", mod->flayer_mask_literal ? "true" : "false");
    fprintf(f, ",\n  \"eval_moment\": \"%s\",\n  \"init_clients\": \"%s\",\n  \"step_budget\": \"%s\"",
            pfl_eval_moment_name(fl->cfg.eval_moment), pfl_init_clients_name(fl->cfg.init_clients),
            pfl_step_budget_name(fl->cfg.step_budget));
    fputs(",\n  \"layer_unit\": ", f); /* what the layer counts below count (nn/layer_units.h) */
    pfl_json_string(f, o->layer_unit ? o->layer_unit : "rows");
    write_param_fields(f, o);
    fprintf(f, ",\n  \"train_fraction\": %g,\n  \"lr_decay\": %g,\n  \"local_steps\": %d,\n  \"public\": %d",
            o->train_fraction, o->cfg.lr_decay, o->cfg.algo.local_steps, r->holdout);
    if (o->cfg.drop_rate > 0.0) fprintf(f, ",\n  \"drop_rate\": %g", o->cfg.drop_rate);
    report_all(fl, f, PFL_REPORT_SUMMARY);
    fputs(",\n  \"best_local_acc\": ", f), pfl_json_number(f, r->best_local);
    fprintf(f, ",\n  \"best_local_round\": %d", r->best_local_round);
    fputs(",\n  \"final_local_acc\": ", f), pfl_json_number(f, r->final_local);
    fputs(",\n  \"final_local_acc_mean\": ", f), pfl_json_number(f, r->final_local_mean);
    fputs(",\n  \"final_local_acc_std\": ", f), pfl_json_number(f, r->final_local_std);
    fputs(",\n  \"best_global_acc\": ", f), pfl_json_number(f, r->best_global);
    fprintf(f, ",\n  \"best_global_round\": %d", r->best_global_round);
    fputs(",\n  \"final_global_acc\": ", f), pfl_json_number(f, r->final_global);
    write_convergence_fields(f, fl, r);
    fputs(",\n  \"seconds_per_round\": ", f);
    pfl_json_number(f, fl->round ? fl->train_seconds / fl->round : NAN);
    fputs(",\n  \"train_samples_per_second\": ", f);
    pfl_json_number(f, fl->train_seconds > 0 ? (double)fl->train_samples / fl->train_seconds : NAN);
    fputs(",\n  \"total_seconds\": ", f), pfl_json_number(f, r->elapsed);
    /* message bytes per round (mean over the rounds run), summed over the clients that trained */
    const double rounds = fl->round > 0 ? fl->round : 1;
    fprintf(f, ",\n  \"bytes_down_per_round\": %.0f,\n  \"bytes_up_per_round\": %.0f",
            (double)fl->bytes_down / rounds, (double)fl->bytes_up / rounds);
    write_transport_fields(f, o, fl, r); /* MPI */
    write_memory_fields(f, o, r);
    write_blas_field(f);
    fputs(",\n  \"data_sha256\": \"", f); /* what was loaded (pfl_dataset_digest) */
    for (int i = 0; i < 32; i++) fprintf(f, "%02x", fl->data_sha256[i]);
    fputs("\",\n  \"personal_models_sha256\": \"", f); /* runs compared bit for bit */
    for (int i = 0; i < 32; i++) fprintf(f, "%02x", fl->personal_sha256[i]);
    fprintf(f, "\",\n  \"global_model_sha256\": \"%s\"\n}\n", sha);
}

int pfl_run_write_summary(const pfl_fl *fl, const run_report *r) {
    char path[4096];
    snprintf(path, sizeof path, "%s/summary.json", r->o->out);
    pfl_atomic_file a;
    if (pfl_atomic_open(&a, path)) return -1;
    write_summary_fields(a.f, r->o, fl, r);
    return pfl_atomic_commit(&a);
}

void pfl_run_say_done(const pfl_fl *fl, const run_report *r) {
    const pfl_run_options *o = r->o;
    if (o->quiet) return;
    line_buffer l;
    if (!line_open(&l)) return;
    fprintf(l.f, "[pfl] done: final local %.4f, best local %.4f (round %d)", r->final_local, r->best_local,
            r->best_local_round);
    if (isfinite(r->final_global)) fprintf(l.f, ", final global %.4f", r->final_global);
    if (r->stopped_early)
        fprintf(l.f, ", stopped early after round %d (--auto-break: no better accuracy in %d evaluations)", fl->round,
                o->top_cnt);
    if (r->diverged_round) fprintf(l.f, ", DIVERGED at round %d", r->diverged_round);
    fprintf(l.f, ", %.1f s/round, %.0f train samples/s\n", fl->round ? fl->train_seconds / fl->round : 0.0,
            fl->train_seconds > 0 ? fl->train_samples / fl->train_seconds : 0.0);
    report_all(fl, l.f, PFL_REPORT_FINAL);
    if (pfl_transport_distributed(o->cfg.transport)) /* MPI */
        fprintf(l.f, "[pfl] mpi: %d processes, uploads by %s; per round %.0f bytes to the server, at most %.0f to a client rank\n",
                o->cfg.transport->size, pfl_fl_aggregation(fl),
                (double)r->traffic.to_server / (fl->rounds_run > 0 ? fl->rounds_run : 1),
                (double)r->traffic.to_client_max / (fl->rounds_run > 0 ? fl->rounds_run : 1));
    if (o->out) fprintf(l.f, "[pfl] wrote %s/metrics.jsonl and %s/summary.json\n", o->out, o->out);
    line_emit(o, &l);
}

FILE *pfl_run_open_metrics(const char *out) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/metrics.jsonl", out) >= (int)sizeof path) {
        pfl_err("%s: path too long", out);
        return NULL;
    }
    return pfl_stream_open(path, false);
}

int pfl_run_close_metrics(run_report *r) {
    char path[4200];
    metrics_path(r, path, sizeof path);
    FILE *f = r->metrics;
    r->metrics = NULL;
    return pfl_stream_close(f, path);
}

/* ---- checkpoints (pfl_run_resume) ---- */

/* What the command itself keeps across rounds: best and final accuracies,
 * and the wall time so far (total_seconds goes on from it). */
static int save_report(pfl_ckpt_writer *w, const run_report *r) {
    const double values[7] = {r->best_local,   r->best_global,      r->final_local, r->final_global,
                              r->final_local_mean, r->final_local_std, r->elapsed};
    const int rounds[2] = {r->best_local_round, r->best_global_round};
    /* the metrics rows this checkpoint covers, so that resuming keeps those and no others */
    pfl_sha256 sha = r->metrics_sha;
    uint8_t digest[32];
    pfl_sha256_final(&sha, digest);
    return pfl_ckpt_put(w, "cli.flags", r->flags, r->flags_len) || pfl_ckpt_put_f64(w, "cli.report", values, 7) ||
                   pfl_ckpt_put_i32(w, "cli.best_rounds", rounds, 2) ||
                   (r->metrics && (pfl_ckpt_put_int(w, "cli.metrics_bytes", (int64_t)r->metrics_bytes) ||
                                   pfl_ckpt_put(w, "cli.metrics_sha256", digest, sizeof digest)))
               ? -1
               : 0;
}

int pfl_run_load_report(pfl_ckpt_reader *rd, run_report *r) {
    double values[7];
    int rounds[2];
    if (pfl_ckpt_get_f64(rd, "cli.report", values, 7) || pfl_ckpt_get_i32(rd, "cli.best_rounds", rounds, 2)) return -1;
    r->best_local = values[0], r->best_global = values[1], r->final_local = values[2], r->final_global = values[3];
    r->final_local_mean = values[4], r->final_local_std = values[5], r->elapsed = values[6];
    r->best_local_round = rounds[0], r->best_global_round = rounds[1];
    r->started = monotonic_seconds() - r->elapsed;
    return 0;
}

static int write_checkpoint(const run_report *r, pfl_fl *fl) {
    char path[4200];
    /* the metrics lines the checkpoint covers reach the disk before it does */
    if (r->metrics) {
        metrics_path(r, path, sizeof path);
        if (pfl_stream_flush(r->metrics, path, true)) return -1;
    }
    /* MPI: every rank's part first (the ranks other than 0 have no --out and write only that); rank 0's
     * file, which names the parts, last */
    if (pfl_fl_save_shards(fl, r->o->out)) return -1;
    if (!r->o->out) return 0;
    snprintf(path, sizeof path, "%s/checkpoint", r->o->out);
    pfl_ckpt_writer w;
    if (pfl_ckpt_begin(&w, path)) return -1;
    if (save_report(&w, r) || pfl_fl_save(fl, &w)) {
        pfl_ckpt_abort(&w);
        return -1;
    }
    if (pfl_ckpt_commit(&w)) return -1;
    pfl_fl_remove_old_shards(fl, r->o->out);
    if (r->folder) r->folder->resumable = true;
    return 0;
}

/* Before anything else (data loading can take a while): a checkpoint of the
 * flags alone, so a run killed at any moment can be resumed: pfl resume
 * starts such a run over from round 0. */
int pfl_run_write_start_checkpoint(const run_report *r) {
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoint", r->o->out);
    pfl_ckpt_writer w;
    if (pfl_ckpt_begin(&w, path)) return -1;
    if (pfl_ckpt_put(&w, "cli.flags", r->flags, r->flags_len) || pfl_ckpt_put_int(&w, "cli.not_started", 1)) {
        pfl_ckpt_abort(&w);
        return -1;
    }
    return pfl_ckpt_commit(&w);
}

/* After round 0's evaluation and every round: the checkpoint when one is
 * due (round 0 always, so a resume never retrains from nothing, and the
 * round a stop signal ends the run after), and --stop-after. */
int pfl_run_after_round(pfl_fl *fl, void *ctx) {
    run_report *r = ctx;
    if (r->write_failed) return -1; /* a metrics line was lost: the run's files would not be whole */
    const int K = r->o->checkpoint_every, round = fl->round;
    if (K > 0 && (round % K == 0 || round == fl->cfg.rounds || fl->stop_signal) && write_checkpoint(r, fl)) return -1;
    /* only right after an evaluation: nothing else changes the answer */
    if (round > 0 && round < fl->cfg.rounds && r->num_evals && r->evals[r->num_evals - 1].round == round && pfl_run_should_stop_early(r)) {
        r->stopped_early = true;
        return 1;
    }
    if (r->diverged_round && !r->o->allow_divergence) return 1; /* the summary says where (run_experiment) */
    return r->o->stop_after > 0 && round == r->o->stop_after ? 1 : 0;
}

bool pfl_run_should_stop_early(const run_report *r) {
    if (!r->o->auto_break || r->num_evals == 0) return false;
    int best = -1;
    for (int i = 0; i < r->num_evals; i++)
        if (isfinite(r->evals[i].local) && (best < 0 || r->evals[i].local > r->evals[best].local)) best = i;
    return best >= 0 && r->num_evals - best > r->o->top_cnt;
}

/* A number of a metrics line (NAN: null or absent, as in lines of an older pfl). */
static double line_number(json_t *line, const char *key) {
    json_t *v = json_object_get(line, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The round of a metrics line, or -1 when it is not a whole one; fills *e
 * with what the run keeps of it. */
static int line_round(const char *line, size_t len, run_eval *e) {
    if (len == 0 || line[len - 1] != '\n') return -1; /* torn by the crash */
    json_t *j = json_loadb(line, len, 0, NULL);
    json_t *round = json_object_get(j, "round");
    const int r = json_is_integer(round) ? (int)json_integer_value(round) : -1;
    *e = (run_eval){.round = r, .local = line_number(j, "local_acc"), .global = line_number(j, "global_acc"),
                    .p10 = line_number(j, "local_acc_p10"), .min = line_number(j, "local_acc_min")};
    json_decref(j);
    return r;
}

/* What a checkpoint says of the metrics rows it covers: their bytes and
 * their SHA-256 (a checkpoint of an older pfl has neither: has = false). */
typedef struct {
    bool has;
    uint64_t bytes;
    uint8_t sha[32];
} covered_rows;

static int read_covered(pfl_ckpt_reader *rd, covered_rows *c) {
    int64_t bytes = 0;
    c->has = pfl_ckpt_has(rd, "cli.metrics_sha256");
    if (!c->has) return 0;
    if (pfl_ckpt_get_int(rd, "cli.metrics_bytes", &bytes) || pfl_ckpt_get(rd, "cli.metrics_sha256", c->sha, 32))
        return -1;
    if (bytes < 0) return pfl_err("%s: cli.metrics_bytes is negative", rd->path);
    c->bytes = (uint64_t)bytes;
    return 0;
}

/* Copies into `to` the lines of `in` the checkpoint covers (with a digest:
 * exactly its bytes, which must hash to it; without, the whole lines up to
 * `round`), read back into rep->evals and the running digest. The count of
 * lines kept, or -1 with a message. */
static int keep_covered_lines(run_report *rep, FILE *in, FILE *to, const covered_rows *c, int round, const char *path) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int kept = 0;
    rep->num_evals = 0;
    pfl_sha256_init(&rep->metrics_sha);
    rep->metrics_bytes = 0;
    run_eval e;
    while ((!c->has || rep->metrics_bytes < c->bytes) && (len = getline(&line, &cap, in)) > 0) {
        const int r = line_round(line, (size_t)len, &e);
        if (!c->has && (r < 0 || r > round)) break; /* a torn last line, or rounds lost with the crash */
        fwrite(line, 1, (size_t)len, to);
        pfl_sha256_update(&rep->metrics_sha, line, (size_t)len);
        rep->metrics_bytes += (uint64_t)len;
        remember_eval(rep, &e);
        kept++;
    }
    free(line);
    rep->evals_resumed = rep->num_evals;
    if (!c->has) return kept;
    pfl_sha256 sha = rep->metrics_sha;
    uint8_t digest[32];
    pfl_sha256_final(&sha, digest);
    if (rep->metrics_bytes < c->bytes)
        return pfl_err("%s: %llu bytes, shorter than the %llu the checkpoint covers (cut short after it was written)",
                       path, (unsigned long long)rep->metrics_bytes, (unsigned long long)c->bytes);
    if (rep->metrics_bytes != c->bytes || memcmp(digest, c->sha, 32) != 0)
        return pfl_err("%s: the lines up to round %d are not the ones the checkpoint was written after (edited, or "
                       "another run's): resuming would mix them into this run",
                       path, round);
    return kept;
}

/* Resuming: metrics.jsonl keeps the lines the checkpoint covers (the rounds
 * after it are redone) and is opened to append; the run's list of
 * evaluations is read back from them. */
FILE *pfl_run_reopen_metrics(run_report *rep, pfl_ckpt_reader *rd, int round) {
    const pfl_run_options *o = rep->o;
    char path[4200];
    metrics_path(rep, path, sizeof path);
    covered_rows covered;
    if (read_covered(rd, &covered)) return NULL;
    FILE *in = pfl_read_open(path);
    if (!in) {
        char why[1024];
        snprintf(why, sizeof why, "%s", pfl_errmsg());
        pfl_err("%s (resuming needs the metrics of the rounds before the checkpoint)", why);
        return NULL;
    }
    pfl_atomic_file a;
    if (pfl_atomic_open(&a, path)) {
        fclose(in);
        return NULL;
    }
    const int kept = keep_covered_lines(rep, in, a.f, &covered, round, path);
    fclose(in);
    const int want = evaluated_rounds(round, o->cfg.eval_every, o->cfg.rounds);
    if (kept >= 0 && kept != want) pfl_err("%s: %d lines up to round %d, expected %d", path, kept, round, want);
    if (kept != want) {
        pfl_atomic_abort(&a);
        return NULL;
    }
    if (pfl_atomic_commit(&a)) return NULL;
    return pfl_stream_open(path, true);
}
