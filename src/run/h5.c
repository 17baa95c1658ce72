/* PFLlib's results files (results.h, pfl_export_h5), written with libhdf5
 * (Debian's libhdf5-dev, serial): what PFLlib's plotting and averaging
 * scripts (system/utils/result_utils.py) read, from a pfl run folder. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/results.h"
#include "util/err.h"

#ifdef PFL_NO_HDF5

int pfl_export_h5(const char *run_dir, const char *path) {
    (void)run_dir;
    return pfl_err("%s: pfl was built without libhdf5 (apt-get install libhdf5-dev, or run scripts/setup.sh, then "
                   "rebuild)",
                   path);
}

#else

#include <hdf5.h>

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

/* The series as PATH.tmp; 0, or -1 with a message and no PATH.tmp left. */
static int write_tmp(const char *path, const pfl_series *s) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return pfl_err("%s: path too long", path);
    double *auc = pfl_malloc(sizeof(double) * (size_t)(s->n ? s->n : 1));
    if (!auc) return -1;
    for (int i = 0; i < s->n; i++) auc[i] = NAN; /* pfl does not compute PFLlib's AUC */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);        /* errors are ours to say, in one line */
    const hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    int rc = file < 0 ? -1 : 0;
    if (rc == 0)
        rc = write_dataset(file, "rs_test_acc", s->local, s->n) || write_dataset(file, "rs_test_auc", auc, s->n) ||
                     write_dataset(file, "rs_train_loss", s->loss, s->n)
                 ? -1
                 : 0;
    if (file >= 0 && H5Fclose(file) < 0) rc = -1;
    free(auc);
    if (rc == 0) return 0;
    remove(tmp);
    return pfl_err("%s: cannot write the HDF5 file", path);
}

/* PATH.tmp renamed over PATH (keep = 1), or removed (keep = 0). */
static int settle(const char *path, int keep) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path); /* write_tmp checked the length */
    if (keep && rename(tmp, path) == 0) return 0;
    remove(tmp);
    return keep ? pfl_err("%s: cannot write the HDF5 file", path) : 0;
}

/* PATH for a single run; PATH with _i before .h5 (or at its end) for seed i of several. */
static int seed_path(char *out, size_t size, const char *path, int i, int n) {
    const size_t len = strlen(path);
    const bool h5 = len > 3 && !strcmp(path + len - 3, ".h5");
    const int k = n == 1 ? snprintf(out, size, "%s", path)
                         : snprintf(out, size, "%.*s_%d.h5", (int)(h5 ? len - 3 : len), path, i);
    return k < 0 || (size_t)k >= size ? pfl_err("%s: path too long", path) : 0;
}

/* Every seed's file is written beside its place first and renamed only
 * when all were: a failure leaves none of them, not the first few. */
int pfl_export_h5(const char *run_dir, const char *path) {
    int n = 0, written = 0, rc = 0;
    char **files = pfl_run_metrics_files(run_dir, &n);
    if (!files) return -1;
    for (; written < n; written++) {
        char out[4096];
        pfl_series s;
        if (seed_path(out, sizeof out, path, written, n) || pfl_series_load(&s, files[written])) break;
        rc = write_tmp(out, &s);
        pfl_series_free(&s);
        if (rc) break;
    }
    rc = written == n ? 0 : -1;
    for (int i = 0; i < written; i++) {
        char out[4096];
        seed_path(out, sizeof out, path, i, n);
        if (settle(out, rc == 0)) rc = -1;
    }
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
    return rc;
}

#endif
