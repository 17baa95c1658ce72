/* PFLlib folders' config.json: the input is the file, beside two clients'
 * files pfl exported once per process (pfllib_config_folder: tests/tiny.h's
 * 1x3x3 images of 3 classes, labels i % 3, 4 train and 2 test samples a
 * client), so every mutation reaches what pfl takes from config.json:
 * num_clients, num_classes, the partition shown on the provenance line, and
 * the label statistics checked against the files. A folder that loads must
 * be one a run can use: its own clients with the samples their files hold,
 * and a provenance line that is one printable line. Seeds: the config.json
 * pfl exports and variants PFLlib's versions write (fuzz/make_seeds.c). */
#include <stdio.h>
#include <string.h>

#include "data/data.h"
#include "fuzz.h"
#include "tiny.h"

enum { CONFIG_CLIENTS = 2, CONFIG_TRAIN = 4, CONFIG_TEST = 2, CONFIG_CLASSES = 3 };

/* The folder, exported on first use; its path. */
static const char *pfllib_config_folder(void) {
    static char dir[512];
    if (dir[0]) return dir;
    fuzz_path(dir, sizeof dir, "pfllib/folder");
    pfl_dataset d = tiny_dataset(CONFIG_CLIENTS * (CONFIG_TRAIN + CONFIG_TEST), 1, 3, 3, CONFIG_CLASSES, 7);
    const int train[CONFIG_CLIENTS] = {CONFIG_TRAIN, CONFIG_TRAIN}, test[CONFIG_CLIENTS] = {CONFIG_TEST, CONFIG_TEST};
    pfl_partition p = tiny_partition(CONFIG_CLIENTS, train, test);
    if (pfl_pfllib_export(&d, &p, "pat", 0.1, "fuzz", dir)) fuzz_fail("pfllib export", pfl_errmsg());
    tiny_partition_free(&p);
    tiny_dataset_free(&d);
    return dir;
}

#ifndef FUZZ_PFLLIB_CONFIG_NO_ENTRY
static void check_loaded(pfl_dataset *d) {
    for (const char *c = d->provenance; *c; c++)
        if (*c < 0x20 || *c > 0x7e) fuzz_fail("pfllib", "the provenance line holds an unprintable byte");
    if (d->own_clients < 1 || d->own_clients > CONFIG_CLIENTS || d->classes < CONFIG_CLASSES || d->classes > 256 ||
        d->n != d->own_clients * (CONFIG_TRAIN + CONFIG_TEST))
        fuzz_fail("pfllib", "impossible success");
    pfl_partition_spec spec;
    pfl_partition p;
    if (pfl_partition_parse(&spec, "pfllib") || pfl_partition_make(&p, d, &spec, d->own_clients, 1))
        fuzz_fail("pfllib", "a loaded folder has no partition");
    for (int k = 0; k < p.num_clients; k++)
        if (p.clients[k].n_train != CONFIG_TRAIN || p.clients[k].n_test != CONFIG_TEST)
            fuzz_fail("pfllib", "a client's counts disagree with its files");
    pfl_partition_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], spec[620];
    snprintf(path, sizeof path, "%s/config.json", pfllib_config_folder());
    fuzz_write(path, data, size);
    snprintf(spec, sizeof spec, "pfllib:%s", pfllib_config_folder());
    pfl_dataset d;
    if (pfl_dataset_load(&d, spec, NULL) == 0) {
        check_loaded(&d);
        pfl_dataset_free(&d);
    } else {
        if (d.labels || d.features || d.text || d.own_counts) fuzz_fail("pfllib", "failed but kept data");
        fuzz_check_message("pfllib: ");
    }
    return 0;
}
#endif
