/* A round's exchange between processes (fl.h, "processes"). */
#include "fl/fl.h"
#include "fl/loop.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

const char *pfl_fl_aggregation(const pfl_fl *fl) { return fl->algo->whole_uploads ? "gather" : "reduce"; }

/* MPI: packs n flags into bits (and back), so an upload mask costs P/8 bytes. */
static void pack_flags(uint8_t *bits, const uint8_t *flags, size_t n) {
    memset(bits, 0, (n + 7) / 8);
    for (size_t j = 0; j < n; j++)
        if (flags[j]) bits[j / 8] |= (uint8_t)(1u << (j % 8));
}

static void unpack_flags(uint8_t *flags, const uint8_t *bits, size_t n) {
    for (size_t j = 0; j < n; j++) flags[j] = (bits[j / 8] >> (j % 8)) & 1u;
}

/* MPI: the span [off, off + len) of upload slot k from the rank `root` that
 * trained it, and the slot's mask over it (as bits, in `bits`) when the
 * mask is on and the span is of trained parameters (the mask covers those
 * only). */
static int share_span(pfl_fl *fl, int k, int root, float *upload, size_t off, size_t len, uint8_t *bits) {
    pfl_transport *t = fl->cfg.transport;
    if (pfl_transport_share(t, upload + off, len * sizeof(float), root)) return -1;
    if (!fl->sent || off >= fl->model->num_params) return 0;
    if (t->rank == root) pack_flags(bits, fl->sent[k] + off, len);
    if (pfl_transport_share(t, bits, (len + 7) / 8, root)) return -1;
    if (t->rank != root) unpack_flags(fl->sent[k] + off, bits, len);
    return 0;
}

/* The spans of an upload a gather sends: the parameters and, apart from
 * them so that the mask goes with the parameters, the running statistics;
 * or, for a method whose aggregate reads the shared rows alone
 * (gather_shared), their parameters, adjacent rows joined. */
static void gathered_spans(const pfl_fl *fl, pfl_spans *out) {
    const pfl_model *m = fl->model;
    memset(out, 0, sizeof *out);
    if (!fl->algo->gather_shared) {
        out->offset[0] = 0, out->length[0] = m->num_params;
        out->offset[1] = m->num_params, out->length[1] = m->num_state;
        out->count = 2;
        return;
    }
    for (int l = 0; l < pfl_model_rows(m); l++)
        if (fl->shared[l]) pfl_spans_add(out, m->layers[l].offset, m->layers[l].length);
}

/* MPI, a gather: every rank gets every upload of the round (the methods
 * that gather compare or fuse whole models: whole_uploads; or read their
 * shared rows: gather_shared), with its mask, from the rank that trained
 * it, slot after slot. */
static int share_uploads(pfl_fl *fl, int n, float *const *uploads) {
    const pfl_model *m = fl->model;
    uint8_t *bits = NULL;
    if (fl->sent && !(bits = pfl_malloc(m->num_params / 8 + 1))) return -1;
    pfl_spans spans;
    gathered_spans(fl, &spans);
    int rc = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        const int root = pfl_fl_trainer(fl, k);
        for (int i = 0; i < spans.count && rc == 0; i++)
            if (spans.length[i] > 0) rc = share_span(fl, k, root, uploads[k], spans.offset[i], spans.length[i], bits);
    }
    free(bits);
    return rc;
}

int pfl_round_exchange(pfl_fl *fl, int n, float *const *uploads, const pfl_slot_record *records,
                       pfl_slot_record *all) {
    pfl_transport *t = fl->cfg.transport;
    const bool mpi = pfl_transport_distributed(t);
    const int P = mpi ? t->size : 1;
    int first, end;
    pfl_fl_my_slots(fl, &first, &end);
    size_t *bytes = pfl_malloc(sizeof(size_t) * (size_t)P);
    if (!bytes) return -1;
    for (int r = 0; r < P; r++) bytes[r] = (size_t)(fl->slot_first[r + 1] - fl->slot_first[r]) * sizeof *records;
    if (mpi) t->tally = PFL_TALLY_ROUND;
    int rc = pfl_transport_wait_all(t); /* every rank has trained its slots */
    if (rc == 0 && mpi && fl->algo->whole_uploads) rc = share_uploads(fl, n, uploads);
    if (rc == 0) rc = pfl_transport_gather(t, records + first, all, bytes);
    if (mpi) t->tally = PFL_TALLY_OTHER;
    free(bytes);
    return rc;
}

int pfl_round_aggregate(pfl_fl *fl, const int *selected, int n, float *const *uploads) {
    pfl_transport *t = fl->cfg.transport;
    const bool reduction = pfl_transport_distributed(t) && !fl->algo->whole_uploads;
    /* a reduction: pfl_default_aggregate (and its variants) and pfl_slot_sum sum along the ranks */
    fl->reducing = reduction ? fl->slot_first : NULL, fl->reduce_failed = false;
    if (reduction) t->tally = PFL_TALLY_ROUND;
    (fl->algo->aggregate ? fl->algo->aggregate : pfl_default_aggregate)(fl, selected, n, uploads);
    if (reduction) t->tally = PFL_TALLY_OTHER;
    fl->reducing = NULL;
    return fl->reduce_failed ? -1 : 0;
}
