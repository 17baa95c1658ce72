/* The PFLlib folder the npz and npy harnesses load (fuzz.h): one client
 * whose train and test files are both the file under test, and a
 * config.json naming 1 client and 4 classes. A folder that loads is used
 * the whole way a run uses it: its own partition, the vocabulary check of
 * text ids, and every sample gathered. */
#ifndef PFL_FUZZ_PFLLIB_FOLDER_H
#define PFL_FUZZ_PFLLIB_FOLDER_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "fuzz.h"

enum { FOLDER_CLASSES = 4 };

static void use_folder(pfl_dataset *d) {
    pfl_partition_spec spec;
    pfl_partition p;
    if (pfl_partition_parse(&spec, "pfllib") || pfl_partition_make(&p, d, &spec, 1, 1))
        fuzz_fail("pfllib", "a loaded folder has no partition");
    if (d->text && pfl_text_build_vocab(d, &p, PFL_TEXT_MAX_VOCAB)) fuzz_fail("pfllib", "text ids beyond 2^24 loaded");
    const pfl_client_data *cd = &p.clients[0];
    if (cd->n_train < 1 || cd->n_train != cd->n_test || cd->n_train + cd->n_test != d->n)
        fuzz_fail("pfllib", "the client's counts disagree with its files");
    const long s = pfl_dataset_sample_size(d);
    float *x = malloc(sizeof(float) * (size_t)s * (size_t)d->n);
    uint8_t *y = malloc((size_t)d->n);
    if (!x || !y) fuzz_fail("pfllib", "out of memory in the harness");
    pfl_dataset_gather(d, cd->train, d->n, x, y); /* train and test lie together */
    for (size_t k = 0; k < (size_t)s * (size_t)d->n; k++)
        if (!isfinite(x[k])) fuzz_fail("pfllib", "a sample value is not finite");
    for (int i = 0; i < d->n; i++)
        if (y[i] >= FOLDER_CLASSES) fuzz_fail("pfllib", "a label outside num_classes");
    free(x);
    free(y);
    pfl_partition_free(&p);
}

/* Writes `file` (size bytes, a client's .npz) as both files of the folder
 * and loads it, checking the contract either way. */
static void load_folder(const uint8_t *file, size_t size) {
    char path[512];
    fuzz_path(path, sizeof path, "folder/config.json");
    char config[64];
    const int n = snprintf(config, sizeof config, "{\"num_clients\": 1, \"num_classes\": %d}", FOLDER_CLASSES);
    fuzz_write(path, config, (size_t)n);
    fuzz_path(path, sizeof path, "folder/train/0.npz");
    fuzz_write(path, file, size);
    fuzz_path(path, sizeof path, "folder/test/0.npz");
    fuzz_write(path, file, size);
    char data[600];
    snprintf(data, sizeof data, "pfllib:%s/folder", fuzz_dir());
    pfl_dataset d;
    if (pfl_dataset_load(&d, data, NULL) == 0) {
        if (d.n < 2 || !d.labels || d.own_clients != 1 || (!d.features && !d.text))
            fuzz_fail("pfllib", "impossible success");
        use_folder(&d);
        pfl_dataset_free(&d);
    } else {
        if (d.labels || d.features || d.text || d.own_counts) fuzz_fail("pfllib", "failed but kept data");
        fuzz_check_message("pfllib: ");
    }
}

#endif
