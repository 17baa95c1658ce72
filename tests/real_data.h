/* Loads a real dataset when it has been fetched (skips, saying so, when not)
 * and checks its size, class count and that every class is present. Shared
 * by test_data.c and test_loaders.c. Include after check.h. */
#ifndef PFL_TESTS_REAL_DATA_H
#define PFL_TESTS_REAL_DATA_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "check.h"
#include "data/data.h"
#include "util/err.h"

/* `name` as pfl_dataset_load knows it, `sub` its folder under the data directory. */
static inline void test_real(const char *name, const char *sub, int n_expect, int classes) {
    const char *dir = getenv("PFL_DATA");
    if (!dir || !*dir) dir = "data";
    char probe[512];
    snprintf(probe, sizeof probe, "%s/%s", dir, sub);
    struct stat st;
    if (stat(probe, &st) != 0) {
        printf("skipped: real %s (no %s; run scripts/fetch-data.sh)\n", name, probe);
        return;
    }
    pfl_dataset d;
    int rc = pfl_dataset_load(&d, name, dir);
    CHECK(rc == 0, "real %s: %s", name, pfl_errmsg());
    if (rc) return;
    CHECK(d.n == n_expect && d.classes == classes, "real %s: n %d classes %d", name, d.n, d.classes);
    long *hist = calloc((size_t)d.classes, sizeof *hist);
    for (int i = 0; i < d.n; i++) hist[d.labels[i]]++;
    int all = 1;
    for (int k = 0; k < d.classes; k++) all &= hist[k] > 0;
    CHECK(all, "real %s: every class present", name);
    printf("real %s: n=%d, %dx%dx%d, %d classes\n", name, d.n, d.c, d.h, d.w, d.classes);
    free(hist);
    pfl_dataset_free(&d);
}

#endif
