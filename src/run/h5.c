/* PFLlib's results files (results.h, pfl_export_h5), written with libhdf5
 * (Debian's libhdf5-dev, serial): what PFLlib's plotting and averaging
 * scripts (system/utils/result_utils.py) read, from a pfl run folder. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run/results.h"
#include "util/err.h"
#include "util/safe_write.h"

#ifdef PFL_NO_HDF5

int pfl_export_h5(const char *run_dir, const char *path) {
    (void)run_dir;
    return pfl_err("%s: pfl was built without libhdf5 (apt-get install libhdf5-dev, or run scripts/setup.sh, then "
                   "rebuild)",
                   path);
}

#else

#include <hdf5.h>
#include <sys/stat.h>

/* One float64 dataset of n values, as h5py's create_dataset(name, data=list). */
static int write_dataset(hid_t file, const char *name, const double *v, int n) {
    const hsize_t dims[1] = {(hsize_t)n};
    const hid_t space = H5Screate_simple(1, dims, NULL);
    if (space < 0) return -1;
    const hid_t set = H5Dcreate2(file, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = set < 0 ? -1 : n ? H5Dwrite(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) : 0;
    if (set >= 0 && H5Dclose(set) < 0) rc = -1;
    H5Sclose(space);
    return rc < 0 ? -1 : 0;
}

/* The series as the file `tmp` (in the scratch folder); 0, or -1 with a
 * message naming `path`, the file it stands for. */
static int write_series(const char *tmp, const char *path, const pfl_series *s) {
    double *auc = pfl_malloc(sizeof(double) * (size_t)(s->n ? s->n : 1));
    if (!auc) return -1;
    for (int i = 0; i < s->n; i++) auc[i] = NAN; /* pfl does not compute PFLlib's AUC */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);        /* errors are ours to say, in one line */
    const hid_t file = H5Fcreate(tmp, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    int rc = file < 0 ? -1 : 0;
    if (rc == 0)
        rc = write_dataset(file, "rs_test_acc", s->local, s->n) || write_dataset(file, "rs_test_auc", auc, s->n) ||
                     write_dataset(file, "rs_train_loss", s->loss, s->n)
                 ? -1
                 : 0;
    if (file >= 0 && H5Fclose(file) < 0) rc = -1;
    free(auc);
    return rc == 0 ? 0 : pfl_err("%s: cannot write the HDF5 file", path);
}

/* PATH for a single run; PATH with _i before .h5 (or at its end) for seed i of several. */
static int seed_path(char *out, size_t size, const char *path, int i, int n) {
    const size_t len = strlen(path);
    const bool h5 = len > 3 && !strcmp(path + len - 3, ".h5");
    const int k = n == 1 ? snprintf(out, size, "%s", path)
                         : snprintf(out, size, "%.*s_%d.h5", (int)(h5 ? len - 3 : len), path, i);
    return k < 0 || (size_t)k >= size ? pfl_err("%s: path too long", path) : 0;
}

/* A private folder beside PATH (libhdf5 writes there, never through a link
 * someone left at PATH): its path in dir, 0 or -1 with a message. */
static int scratch_folder(char *dir, size_t size, const char *path) {
    const char *slash = strrchr(path, '/');
    const int dir_len = slash ? (int)(slash - path) : 0;
    if (dir_len > 0) {
        char parent[4096];
        snprintf(parent, sizeof parent, "%.*s", dir_len, path);
        if (pfl_mkdirs(parent)) return -1;
    }
    if (snprintf(dir, size, "%.*s%s.pfl-h5-XXXXXX", dir_len, path, slash ? "/" : "") >= (int)size)
        return pfl_err("%s: path too long", path);
    return mkdtemp(dir) ? 0 : pfl_err("%s: cannot create a scratch folder: %s", dir, strerror(errno));
}

/* The scratch file of seed i. */
static void scratch_file(char *out, size_t size, const char *dir, int i) { snprintf(out, size, "%s/%d.h5", dir, i); }

/* Every seed's file is written in the scratch folder first and moved into
 * place (pfl_atomic_place: fsynced, renamed over a regular file or nothing)
 * only when all were: a failure leaves none of them, not the first few. */
/* PFLlib's results file holds a whole run: a metrics.jsonl without the
 * summary.json beside it (a run stopped or killed before its end) would
 * make a truncated curve look complete. */
static int check_finished(const char *metrics) {
    char summary[4300];
    const char *slash = strrchr(metrics, '/');
    const int dir_len = slash ? (int)(slash - metrics) : 1;
    snprintf(summary, sizeof summary, "%.*s/summary.json", dir_len, slash ? metrics : ".");
    struct stat st;
    if (stat(summary, &st) == 0 && S_ISREG(st.st_mode)) return 0;
    return pfl_err("%.*s: the run is not finished (no summary.json beside its metrics.jsonl): pfl resume it first; "
                   "PFLlib's results file holds a whole run",
                   dir_len, slash ? metrics : ".");
}

int pfl_export_h5(const char *run_dir, const char *path) {
    int n = 0, written = 0;
    char dir[4200], out[4096], tmp[4300];
    char **files = pfl_run_metrics_files(run_dir, &n);
    if (!files) return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) rc = check_finished(files[i]);
    for (int i = 0; i < n && rc == 0; i++) /* a link, a pipe or a folder at a target: refused before anything */
        rc = seed_path(out, sizeof out, path, i, n) || pfl_write_target_check(out) ? -1 : 0;
    const bool scratch = rc == 0 && scratch_folder(dir, sizeof dir, path) == 0;
    if (!scratch) rc = -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        pfl_series s;
        seed_path(out, sizeof out, path, i, n);
        scratch_file(tmp, sizeof tmp, dir, i);
        written = i + 1; /* its scratch file may be there from now on */
        if (pfl_series_load(&s, files[i])) {
            rc = -1;
        } else {
            rc = write_series(tmp, out, &s);
            pfl_series_free(&s);
        }
    }
    for (int i = 0; i < written; i++) {
        seed_path(out, sizeof out, path, i, n);
        scratch_file(tmp, sizeof tmp, dir, i);
        if (rc == 0 && pfl_atomic_place(tmp, out)) rc = -1;
        unlink(tmp); /* gone once placed; removed when not */
    }
    if (scratch) rmdir(dir);
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
    return rc;
}

#endif
