/* Markdown tables of run folders (results.h): mean ± std over seeds, the
 * best of each column in bold (pFL-Bench's convention), and, for a paper's
 * preset, the paper's number beside pfl's and the gap. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/results.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open: regular files only */

/* A table in memory: rows x columns of text cells, plus for each cell the
 * number it ranks by (NAN: not ranked), so the best can be bolded. */
typedef struct {
    int rows, cols;
    char **text;      /* rows x cols, malloc'd */
    double *rank;     /* rows x cols */
    int *better;      /* per column: +1 larger is better, -1 smaller, 0 not ranked */
} grid;

static int grid_init(grid *g, int rows, int cols) {
    g->rows = rows, g->cols = cols;
    g->text = pfl_calloc((size_t)(rows * cols), sizeof(char *));
    g->rank = pfl_malloc(sizeof(double) * (size_t)(rows * cols));
    g->better = pfl_calloc((size_t)cols, sizeof(int));
    if (!g->text || !g->rank || !g->better) return -1;
    for (int i = 0; i < rows * cols; i++) g->rank[i] = NAN;
    return 0;
}

static void grid_free(grid *g) {
    for (int i = 0; g->text && i < g->rows * g->cols; i++) free(g->text[i]);
    free(g->text), free(g->rank), free(g->better);
}

static void put(grid *g, int row, int col, double rank, const char *fmt, ...) PFL_PRINTF(5, 6);
static void put(grid *g, int row, int col, double rank, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(g->text[row * g->cols + col]);
    g->text[row * g->cols + col] = strdup(buf);
    g->rank[row * g->cols + col] = rank;
}

/* Writes the grid as markdown under `head`, the best ranked cell of each
 * ranked column (all ties) in bold. Cells with '|' are escaped. */
static void grid_print(FILE *out, const grid *g, const char *const *head) {
    fputc('|', out);
    for (int c = 0; c < g->cols; c++) fprintf(out, " %s |", head[c]);
    fputs("\n|", out);
    for (int c = 0; c < g->cols; c++) fputs(c ? "---:|" : "---|", out);
    fputc('\n', out);
    for (int r = 0; r < g->rows; r++) {
        fputc('|', out);
        for (int c = 0; c < g->cols; c++) {
            const double v = g->rank[r * g->cols + c];
            bool best = g->better[c] != 0 && isfinite(v);
            for (int o = 0; best && o < g->rows; o++) {
                const double w = g->rank[o * g->cols + c];
                if (isfinite(w) && (g->better[c] > 0 ? w > v : w < v)) best = false;
            }
            const char *t = g->text[r * g->cols + c] ? g->text[r * g->cols + c] : "";
            fputs(best ? " **" : " ", out);
            for (; *t; t++) fputs(*t == '|' ? "\\|" : (char[]){*t, 0}, out);
            fputs(best ? "** |" : " |", out);
        }
        fputc('\n', out);
    }
}

/* "97.93 ± 0.05" (several seeds) or "97.93", scaled, with `decimals`. */
static void format_stat(char *buf, size_t size, pfl_stat s, double scale, int decimals) {
    if (s.n == 0) snprintf(buf, size, "-");
    else if (s.n == 1) snprintf(buf, size, "%.*f", decimals, s.mean * scale);
    else snprintf(buf, size, "%.*f ± %.*f", decimals, s.mean * scale, decimals, s.std * scale);
}

static void put_stat(grid *g, int row, int col, pfl_stat s, double scale, int decimals) {
    char buf[128];
    /* counts (rounds) shown whole only when they are: a mean over seeds may not be */
    if (decimals == 0 && s.n && (s.mean != floor(s.mean) || s.std != floor(s.std))) decimals = 1;
    format_stat(buf, sizeof buf, s, scale, decimals);
    put(g, row, col, s.n ? s.mean * scale : NAN, "%s", buf);
}

static const char *base_name(const char *path) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    const char *b = path + len;
    while (b > path && b[-1] != '/') b--;
    return b;
}

static void put_budget(grid *g, int row, int col, const pfl_run_summary *s) {
    put(g, row, col, NAN, "%d × %d", pfl_summary_seeds(s), pfl_summary_rounds(s));
}

int pfl_table_runs(FILE *out, char **dirs, char **labels, int n) {
    static const char *const head[] = {"run",        "best personalized (%)", "final personalized (%)",
                                       "best global (%)", "final global (%)",  "rounds to converge",
                                       "s/round",    "seeds × rounds"};
    static const char *const keys[] = {"best_local_acc", "final_local_acc", "best_global_acc", "final_global_acc",
                                       "converged_local_round", "seconds_per_round"};
    grid g;
    if (grid_init(&g, n, 8)) return -1;
    for (int c = 1; c <= 4; c++) g.better[c] = 1;
    g.better[5] = -1;
    int rc = 0;
    for (int r = 0; r < n && rc == 0; r++) {
        pfl_run_summary *s = pfl_summary_load(dirs[r]);
        if (!s) {
            rc = -1;
            break;
        }
        char name[256];
        snprintf(name, sizeof name, "%s", labels && labels[r] ? labels[r] : base_name(dirs[r]));
        put(&g, r, 0, NAN, "%s", name);
        for (int k = 0; k < 4; k++) put_stat(&g, r, 1 + k, pfl_summary_stat(s, keys[k]), 100.0, 2);
        put_stat(&g, r, 5, pfl_summary_stat(s, keys[4]), 1.0, 0);
        put_stat(&g, r, 6, pfl_summary_stat(s, keys[5]), 1.0, 2);
        put_budget(&g, r, 7, s);
        pfl_summary_free(s);
    }
    if (rc == 0) {
        grid_print(out, &g, head);
        fputs("\nmean ± std over seeds (population std); accuracies: Σ correct / Σ test over all clients "
              "(docs/evaluation.md); rounds to converge: the first evaluated round within 0.5 points of the best "
              "personalized accuracy; best in bold.\n",
              out);
    }
    grid_free(&g);
    return rc;
}

/* ---- a paper's table ---- */

/* What a preset's cell reads of its run: which accuracy, best or final. */
static const char *cell_key(const pfl_preset *p, const pfl_preset_cell *c, bool final) {
    const char *metric = c->metric ? c->metric : p->metric ? p->metric : "personalized";
    const bool global = !strcmp(metric, "global");
    if (final) return global ? "final_global_acc" : "final_local_acc";
    return global ? "best_global_acc" : "best_local_acc";
}

/* The paper's number as printed: "97.93 ± 0.05", "≈ 63", "-". */
static void put_paper(grid *g, int row, int col, const pfl_preset_number *n, int decimals) {
    if (!n->has || !n->has_mean) put(g, row, col, NAN, "-");
    else if (n->approx) put(g, row, col, n->mean, "≈ %s", n->mean_text);
    else if (n->has_std) put(g, row, col, n->mean, "%.*f ± %.*f", decimals, n->mean, decimals, n->std);
    else put(g, row, col, n->mean, "%.*f", decimals, n->mean);
}

static void put_gap(grid *g, int row, int col, pfl_stat s, double scale, const pfl_preset_number *n, int decimals) {
    if (!s.n || !n->has || !n->has_mean) put(g, row, col, NAN, "-");
    else put(g, row, col, NAN, "%+.*f", decimals, s.mean * scale - n->mean);
}

/* The first flag the cell (or the whole file) names that the file marks
 * as not in pfl yet, or NULL. */
static const char *pending_flag_of(const pfl_preset *p, const pfl_preset_cell *c) {
    const pfl_preset_flags *sets[] = {&c->flags, &c->assumed, &p->setting, &p->assumed};
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++)
        for (int i = 0; i < sets[k]->n; i++)
            if (pfl_preset_pending_flag(p, sets[k]->at[i].key)) return sets[k]->at[i].key;
    return NULL;
}

/* Why a cell has no numbers: the method or a flag is not in pfl yet, or its
 * run is missing or unfinished. */
static void put_missing(grid *g, int row, int col, const pfl_preset *p, const pfl_preset_cell *c, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, c->run);
    FILE *f = NULL;
    char ck[4300];
    snprintf(ck, sizeof ck, "%s/checkpoint", path);
    const char *flag = pending_flag_of(p, c);
    if (pfl_preset_pending_algo(p, c->algo)) put(g, row, col, NAN, "not run: %s is not in pfl yet", c->algo);
    else if (flag) put(g, row, col, NAN, "not run: --%s is not in pfl yet", flag);
    else if ((f = pfl_read_open(ck))) put(g, row, col, NAN, "unfinished (pfl resume %s)", path);
    else put(g, row, col, NAN, "not run (no %s/summary.json)", path);
    if (f) fclose(f);
}

/* Accuracy columns: label, metric, pfl (best and/or final), paper, gap(s),
 * seeds x rounds. */
static int accuracy_table(FILE *out, const pfl_preset *p, const char *dir) {
    const bool show_best = !p->reported || strcmp(p->reported, "final");
    const bool show_final = !p->reported || !strcmp(p->reported, "final");
    const bool fraction = p->unit && !strcmp(p->unit, "fraction");
    const double scale = fraction ? 1.0 : 100.0;
    const int d = p->decimals;
    const char *head[9];
    int cols = 0;
    head[cols++] = "row", head[cols++] = "accuracy";
    const int best_col = show_best ? cols : -1;
    if (show_best) head[cols++] = "pfl (best)";
    const int final_col = show_final ? cols : -1;
    if (show_final) head[cols++] = "pfl (final)";
    const int paper_col = cols;
    head[cols++] = "paper";
    const int gap_best = show_best ? cols : -1;
    if (show_best) head[cols++] = show_final ? "gap (best)" : "gap";
    const int gap_final = show_final ? cols : -1;
    if (show_final) head[cols++] = show_best ? "gap (final)" : "gap";
    const int budget_col = cols;
    head[cols++] = "seeds × rounds";
    grid g;
    if (grid_init(&g, p->num_cells, cols)) return -1;
    if (best_col >= 0) g.better[best_col] = 1;
    if (final_col >= 0) g.better[final_col] = 1;
    g.better[paper_col] = 1;
    for (int r = 0; r < p->num_cells; r++) {
        const pfl_preset_cell *c = &p->cells[r];
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, c->run);
        put(&g, r, 0, NAN, "%s", c->label);
        const char *metric = c->metric ? c->metric : p->metric ? p->metric : "personalized";
        put(&g, r, 1, NAN, "%s", metric);
        put_paper(&g, r, paper_col, &c->paper, d);
        pfl_run_summary *s = pfl_summary_load(path);
        if (!s) {
            put_missing(&g, r, best_col >= 0 ? best_col : final_col, p, c, dir);
            continue;
        }
        const pfl_stat best = pfl_summary_stat(s, cell_key(p, c, false));
        const pfl_stat final = pfl_summary_stat(s, cell_key(p, c, true));
        if (best_col >= 0) put_stat(&g, r, best_col, best, scale, d), put_gap(&g, r, gap_best, best, scale, &c->paper, d);
        if (final_col >= 0)
            put_stat(&g, r, final_col, final, scale, d), put_gap(&g, r, gap_final, final, scale, &c->paper, d);
        put_budget(&g, r, budget_col, s);
        pfl_summary_free(s);
    }
    grid_print(out, &g, head);
    grid_free(&g);
    return 0;
}

/* A cost table (FLAYER's Table 3): iterations to convergence of the
 * personalized accuracy and the time they took here, beside the paper's. */
static int cost_table(FILE *out, const pfl_preset *p, const char *dir) {
    static const char *const head[] = {"row", "pfl #iter", "paper #iter", "gap (#iter)", "pfl time (s)",
                                       "paper time (s)", "seeds × rounds"};
    grid g;
    if (grid_init(&g, p->num_cells, 7)) return -1;
    g.better[1] = g.better[2] = g.better[4] = g.better[5] = -1;
    for (int r = 0; r < p->num_cells; r++) {
        const pfl_preset_cell *c = &p->cells[r];
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, c->run);
        put(&g, r, 0, NAN, "%s", c->label);
        const pfl_preset_number *n = &c->paper;
        if (n->has && n->has_iters) put(&g, r, 2, n->iters, "%.0f", n->iters);
        if (n->has && n->has_seconds) put(&g, r, 5, n->seconds, "%.0f", n->seconds);
        pfl_run_summary *s = pfl_summary_load(path);
        if (!s) {
            put_missing(&g, r, 1, p, c, dir);
            continue;
        }
        const pfl_stat iters = pfl_summary_stat(s, "converged_local_round");
        const pfl_stat spr = pfl_summary_stat(s, "seconds_per_round");
        put_stat(&g, r, 1, iters, 1.0, 0);
        if (iters.n && n->has && n->has_iters) put(&g, r, 3, NAN, "%+.0f", iters.mean - n->iters);
        if (iters.n && spr.n) put(&g, r, 4, iters.mean * spr.mean, "%.0f", iters.mean * spr.mean);
        put_budget(&g, r, 6, s);
        pfl_summary_free(s);
    }
    grid_print(out, &g, head);
    grid_free(&g);
    return 0;
}

int pfl_table_preset(FILE *out, const pfl_preset *p, const char *dir) {
    const bool cost = p->reported && !strcmp(p->reported, "convergence");
    fprintf(out, "### %s %s, %s\n\n", p->paper, p->table, p->column);
    if (cost ? cost_table(out, p, dir) : accuracy_table(out, p, dir)) return -1;
    fprintf(out, "\npfl: mean ± std over its seeds (population std), from %s/<row>/; paper: %s", dir,
            p->runs > 0 ? "" : "as printed");
    if (p->runs > 0) fprintf(out, "mean ± std over %d run%s as printed", p->runs, p->runs == 1 ? "" : "s");
    if (cost)
        fputs(". #iter: the first evaluated round within 0.5 points of the best personalized accuracy (the paper "
              "does not say its criterion); time: #iter × pfl's seconds per round on this machine (the paper's "
              "are another machine's)",
              out);
    else
        fprintf(out, "; %s accuracy%s; gap: pfl - paper, in %s", p->reported ? p->reported : "best and final",
                p->reported ? " (as the paper reports)" : " (the paper does not say which)",
                p->unit && !strcmp(p->unit, "fraction") ? "fractions" : "points");
    fprintf(out, ". Best in bold. Preset: %s.\n", p->path);
    return 0;
}
