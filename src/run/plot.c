/* Pictures (results.h), drawn by gnuplot: pfl writes the data and a script
 * into a scratch folder beside the output, runs `gnuplot SCRIPT`, and moves
 * the PNG (pngcairo) and SVG (svg) into place only when both were drawn, so
 * a failure leaves nothing half-written; each replaces only a regular file
 * or nothing (util/safe_write.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run/results.h"
#include "util/err.h"
#include "util/safe_write.h"

extern char **environ;

/* ---- the scratch folder and gnuplot ---- */

typedef struct {
    char dir[4096];     /* scratch folder */
    char prefix[4096];  /* PREFIX of PREFIX.png and PREFIX.svg */
} canvas;

/* PREFIX without a .png or .svg ending, and a scratch folder in its folder. */
static int canvas_open(canvas *c, const char *prefix) {
    size_t len = strlen(prefix);
    if (len == 0 || len >= sizeof c->prefix - 8) return pfl_err("--out '%s': expected a file name", prefix);
    memcpy(c->prefix, prefix, len + 1);
    if (len > 4 && (!strcmp(prefix + len - 4, ".png") || !strcmp(prefix + len - 4, ".svg"))) c->prefix[len - 4] = '\0';
    char target[4200]; /* refused before anything is drawn: a link, a pipe, a device or a folder there */
    for (int i = 0; i < 2; i++)
        if (snprintf(target, sizeof target, "%s.%s", c->prefix, i ? "svg" : "png"), pfl_write_target_check(target))
            return -1;
    const char *slash = strrchr(c->prefix, '/');
    const int dir_len = slash ? (int)(slash - c->prefix) : 0;
    if (dir_len > 0) {
        char parent[4096];
        snprintf(parent, sizeof parent, "%.*s", dir_len, c->prefix);
        if (pfl_mkdirs(parent)) return -1;
    }
    snprintf(c->dir, sizeof c->dir, "%.*s%s.pfl-plot-XXXXXX", dir_len, c->prefix, slash ? "/" : "");
    if (!mkdtemp(c->dir)) return pfl_err("%s: cannot create a scratch folder: %s", c->dir, strerror(errno));
    return 0;
}

static void canvas_close(canvas *c) {
    static const char *const names[] = {"plot.gp", "gnuplot.err", "out.png", "out.svg", NULL};
    char path[4200];
    for (int i = 0; names[i]; i++) snprintf(path, sizeof path, "%s/%s", c->dir, names[i]), unlink(path);
    for (int i = 0; i < 64; i++) snprintf(path, sizeof path, "%s/d%d.dat", c->dir, i), unlink(path);
    rmdir(c->dir);
}

static FILE *canvas_file(const canvas *c, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", c->dir, name);
    FILE *f = fopen(path, "w");
    if (!f) pfl_err("%s: cannot write", path);
    return f;
}

/* A string as a gnuplot single-quoted literal ('' is a quote). */
static void gp_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* The first line gnuplot wrote on stderr, for an error message. */
static void first_error_line(const canvas *c, char *buf, size_t size) {
    char path[4200];
    snprintf(path, sizeof path, "%s/gnuplot.err", c->dir);
    buf[0] = '\0';
    FILE *f = pfl_read_open(path);
    if (!f) return;
    while (fgets(buf, (int)size, f)) {
        buf[strcspn(buf, "\n")] = '\0';
        if (buf[strspn(buf, " ^")]) break; /* gnuplot underlines the culprit with a line of spaces and ^ */
    }
    fclose(f);
}

/* Runs gnuplot on the scratch folder's plot.gp, then moves out.png and
 * out.svg to PREFIX.png and PREFIX.svg. */
static int canvas_draw(canvas *c) {
    char script[4200], err[4200];
    snprintf(script, sizeof script, "%s/plot.gp", c->dir);
    snprintf(err, sizeof err, "%s/gnuplot.err", c->dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    char *argv[] = {"gnuplot", script, NULL};
    pid_t pid;
    const int spawned = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (spawned == ENOENT)
        return pfl_err("gnuplot not found: pictures are drawn by gnuplot (apt-get install gnuplot-nox, or scripts/setup.sh)");
    if (spawned != 0) return pfl_err("gnuplot: cannot start: %s", strerror(spawned));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return pfl_err("gnuplot: %s", strerror(errno));
    char line[512];
    first_error_line(c, line, sizeof line);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return pfl_err("gnuplot failed%s%s", line[0] ? ": " : "", line);
    static const char *const ext[] = {"png", "svg"};
    char from[4200], to[4200];
    for (int i = 0; i < 2; i++) { /* both drawn, or neither moved */
        snprintf(from, sizeof from, "%s/out.%s", c->dir, ext[i]);
        struct stat st;
        if (stat(from, &st) != 0 || st.st_size == 0)
            return pfl_err("gnuplot drew no %s%s%s", ext[i], line[0] ? ": " : "", line);
    }
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/out.%s", c->dir, ext[i]);
        snprintf(to, sizeof to, "%s.%s", c->prefix, ext[i]);
        if (pfl_atomic_place(from, to)) return -1;
    }
    return 0;
}

/* Both terminals over the same plot commands: `body` is written once, after
 * the PNG terminal, and replotted on the SVG one. */
static void script_begin(FILE *f, const canvas *c, int width, int height) {
    fprintf(f, "set terminal pngcairo size %d,%d noenhanced font 'Sans,11' background rgb 'white'\n", width, height);
    fputs("set output ", f), gp_quote(f, c->dir), fputs(" . '/out.png'\n", f);
}

/* Ends the script with the SVG terminal, closes it and runs gnuplot on it:
 * 0, or -1 with a message. */
static int script_end_and_draw(FILE *f, canvas *c, int width, int height) {
    fprintf(f, "set terminal svg size %d,%d noenhanced font 'Sans,11' background rgb 'white'\n", width, height);
    fputs("set output ", f), gp_quote(f, c->dir), fputs(" . '/out.svg'\nreplot\nunset output\n", f);
    if (fclose(f) != 0) return pfl_err("%s/plot.gp: write failed", c->dir);
    return canvas_draw(c);
}

/* ---- accuracy curves ---- */

/* "out/fedavg/" -> "fedavg" (into a static buffer). */
static const char *base_name(const char *path) {
    static char buf[256];
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(buf, sizeof buf, "%.*s", (int)(len - start), path + start);
    return buf;
}

/* Colours of the curves (one per run, repeating after ten), and the point
 * shape, which changes each time the colours repeat: a table of 14 methods
 * drew two runs in one colour with one shape, so the legend could not tell
 * them apart (gnuplot's filled circle, square, triangle, diamond, pentagon). */
static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                      "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
static const int point_types[] = {7, 5, 9, 13, 15};

/* d<i>.dat: round, then for local and global: mean, band low, band high (%). */
static int write_curve_data(const canvas *c, int i, const pfl_curve *cv, bool minmax) {
    char name[32];
    snprintf(name, sizeof name, "d%d.dat", i);
    FILE *f = canvas_file(c, name);
    if (!f) return -1;
    for (int k = 0; k < cv->n; k++) {
        const double lm = cv->local[k], gm = cv->global[k];
        const double llo = minmax ? cv->local_min[k] : lm - cv->local_std[k];
        const double lhi = minmax ? cv->local_max[k] : lm + cv->local_std[k];
        const double glo = minmax ? cv->global_min[k] : gm - cv->global_std[k];
        const double ghi = minmax ? cv->global_max[k] : gm + cv->global_std[k];
        const double v[6] = {lm, llo, lhi, gm, glo, ghi};
        fprintf(f, "%d", cv->round[k]);
        for (int j = 0; j < 6; j++) {
            if (isfinite(v[j])) fprintf(f, " %.6f", 100.0 * v[j]);
            else fputs(" NaN", f);
        }
        fputc('\n', f);
    }
    return fclose(f) == 0 ? 0 : pfl_err("%s/%s: write failed", c->dir, name);
}

static bool has_finite(const double *v, int n) {
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) return true;
    return false;
}

/* One run's curves: the band (several seeds), then the line. */
static void plot_run(FILE *f, bool *first, const canvas *c, int i, const char *label, const pfl_curve *cv, bool global) {
    const char *color = palette[i % 10];
    const int point = point_types[(i / 10) % 5];
    const int col = global ? 5 : 2;
    char data[4200];
    snprintf(data, sizeof data, "%s/d%d.dat", c->dir, i);
    if (cv->seeds > 1) {
        fputs(*first ? "plot " : ", \\\n     ", f), *first = false;
        gp_quote(f, data);
        fprintf(f, " using 1:%d:%d with filledcurves lc rgb '%s' notitle", col + 1, col + 2, color);
    }
    fputs(*first ? "plot " : ", \\\n     ", f), *first = false;
    gp_quote(f, data);
    fprintf(f, " using 1:%d with linespoints lw 2 pt %d ps %s dt %d lc rgb '%s' title ", col, point, point == 7 ? "0.5" : "0.9",
            global ? 2 : 1, color);
    char title[600];
    snprintf(title, sizeof title, "%s%s", label, global ? " (global)" : " (personalized)");
    if (cv->seeds > 1) snprintf(title + strlen(title), sizeof title - strlen(title), ", %d seeds", cv->seeds);
    gp_quote(f, title);
}

int pfl_plot_curves(char **dirs, char **labels, int n, const pfl_plot_options *o, const char *prefix) {
    if (n < 1 || n > 64) return pfl_err("pfl plot: expected 1 to 64 run folders, got %d", n);
    if (!o->local && !o->global) return pfl_err("pfl plot: nothing to draw (neither personalized nor global)");
    pfl_curve *cv = pfl_calloc((size_t)n, sizeof *cv);
    if (!cv) return -1;
    canvas c;
    int rc = -1, loaded = 0;
    bool multi = false;
    for (; loaded < n; loaded++) {
        if (pfl_curve_load(&cv[loaded], dirs[loaded])) goto done;
        multi |= cv[loaded].seeds > 1;
    }
    if (canvas_open(&c, prefix)) goto done;
    for (int i = 0; i < n; i++)
        if (write_curve_data(&c, i, &cv[i], o->minmax)) goto close;
    FILE *f = canvas_file(&c, "plot.gp");
    if (!f) goto close;
    script_begin(f, &c, 1200, 600);
    if (o->title) fputs("set title ", f), gp_quote(f, o->title), fputc('\n', f);
    int last = 1; /* whole-round tics, about ten of them */
    for (int i = 0; i < n; i++) last = cv[i].n && cv[i].round[cv[i].n - 1] > last ? cv[i].round[cv[i].n - 1] : last;
    fprintf(f, "set xrange [0:%d]\nset xtics %d\nset yrange [0:100]\n", last, (last + 9) / 10);
    fputs("set xlabel 'round'\nset ylabel 'accuracy (%)'\nset grid\n", f);
    /* the legend beside the frame, not over it: with a dozen curves a key
     * inside covered the late rounds where the methods differ */
    fputs("set key outside right top box\n", f);
    fputs("set style fill transparent solid 0.2 noborder\nset datafile missing 'NaN'\n", f);
    if (multi) { /* what the band is, said on the picture */
        fputs("set label 1 ", f);
        gp_quote(f, o->minmax ? "bands: least to largest seed" : "bands: mean ± 1 std over seeds");
        fputs(" at graph 0.01, graph 0.97 left font 'Sans,9'\n", f);
    }
    bool first = true;
    for (int i = 0; i < n; i++) {
        const char *label = labels && labels[i] ? labels[i] : base_name(dirs[i]);
        if (o->local && has_finite(cv[i].local, cv[i].n)) plot_run(f, &first, &c, i, label, &cv[i], false);
        if (o->global && has_finite(cv[i].global, cv[i].n)) plot_run(f, &first, &c, i, label, &cv[i], true);
    }
    if (first) fputs("plot NaN notitle", f); /* nothing finite: an empty frame says so */
    fputc('\n', f);
    rc = script_end_and_draw(f, &c, 1200, 600);
close:
    canvas_close(&c);
done:
    for (int i = 0; i < loaded; i++) pfl_curve_free(&cv[i]);
    free(cv);
    return rc;
}

/* ---- a partition ---- */

int pfl_plot_partition(const pfl_dataset *d, const pfl_partition *p, const char *title, const char *prefix) {
    const int K = d->classes, N = p->num_clients;
    long *counts = pfl_calloc((size_t)K, sizeof(long));
    if (!counts) return -1;
    canvas c;
    int rc = -1;
    if (canvas_open(&c, prefix)) {
        free(counts);
        return -1;
    }
    FILE *data = canvas_file(&c, "d0.dat"), *f = NULL;
    if (!data) goto close;
    long largest = 1;
    for (int i = 0; i < N; i++) { /* client class count, one line a box */
        const pfl_client_data *cd = &p->clients[i];
        memset(counts, 0, sizeof(long) * (size_t)K);
        for (int s = 0; s < cd->n_train; s++) counts[d->labels[cd->train[s]]]++;
        for (int s = 0; s < cd->n_test; s++) counts[d->labels[cd->test[s]]]++;
        for (int k = 0; k < K; k++) {
            fprintf(data, "%d %d %ld\n", i, k, counts[k]);
            largest = counts[k] > largest ? counts[k] : largest;
        }
    }
    if (fclose(data) != 0 || !(f = canvas_file(&c, "plot.gp"))) goto close;
    const int width = 260 + 28 * (K < 10 ? 10 : K > 100 ? 100 : K), height = 160 + 14 * (N < 20 ? 20 : N > 200 ? 200 : N);
    script_begin(f, &c, width, height);
    if (title) fputs("set title ", f), gp_quote(f, title), fputc('\n', f);
    fprintf(f, "set xlabel 'class'\nset ylabel 'client'\nset xrange [-0.5:%d.5]\nset yrange [%d.5:-0.5]\n", K - 1, N - 1);
    fprintf(f, "set xtics %d\nset ytics %d\nset cbrange [0:%ld]\nset cblabel 'samples (train + test)'\n",
            K > 20 ? 10 : 1, N > 40 ? 10 : N > 20 ? 5 : 1, largest);
    fputs("set palette defined (0 '#ffffff', 1 '#c6dbef', 2 '#4292c6', 3 '#08306b')\nunset key\n", f);
    fputs("set style fill solid 1.0 noborder\nplot ", f);
    char path[4200];
    snprintf(path, sizeof path, "%s/d0.dat", c.dir);
    gp_quote(f, path);
    fputs(" using 2:1:(0.5):(0.5):3 with boxxyerror fillcolor palette\n", f);
    rc = script_end_and_draw(f, &c, width, height);
close:
    canvas_close(&c);
    free(counts);
    return rc;
}
