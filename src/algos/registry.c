#include <stdio.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

const pfl_algo *const pfl_algos[] = {&pfl_algo_fedavg, &pfl_algo_local, &pfl_algo_fedprox, &pfl_algo_fedper,
                                     &pfl_algo_fedrep, &pfl_algo_ditto, &pfl_algo_fedala, &pfl_algo_flayer,
                                     /* fedamp, pfedcfr */
                                     &pfl_algo_fedamp, &pfl_algo_pfedcfr,
                                     /* FedALP */
                                     &pfl_algo_fedalp,
                                     /* pFedMe, CFL */
                                     &pfl_algo_pfedme, &pfl_algo_cfl,
                                     /* FedTSDP */
                                     &pfl_algo_fedtsdp,
                                     /* methods that change the model */
                                     &pfl_algo_lgfedavg, &pfl_algo_fedbabu, &pfl_algo_apfl, &pfl_algo_fedrod, &pfl_algo_fedcp,
                                     &pfl_algo_gpfl,
                                     /* FedALA's baselines */
                                     &pfl_algo_fedavg_c, &pfl_algo_fedprox_c, &pfl_algo_perfedavg, &pfl_algo_fedphp,
                                     /* several downloaded models; partial loading */
                                     &pfl_algo_fedfomo, &pfl_algo_apple, &pfl_algo_partialfed,
                                     /* methods that exchange class prototypes */
                                     &pfl_algo_fedproto, &pfl_algo_fd, &pfl_algo_fedpcl, &pfl_algo_fedgh,
                                     &pfl_algo_fedpac,
                                     /* traditional methods */
                                     &pfl_algo_scaffold, &pfl_algo_feddyn, &pfl_algo_fedlc, &pfl_algo_fedntd,
                                     /* PFLlib's personalized methods */
                                     &pfl_algo_fml, &pfl_algo_fedkd, &pfl_algo_feddbe, &pfl_algo_fedmtl, &pfl_algo_fedbn,
                                     &pfl_algo_fedcac, &pfl_algo_fedas, &pfl_algo_pfl_da, &pfl_algo_fedgc,
                                     /* PFLlib's traditional methods: MOON, FedGen, FedCross */
                                     &pfl_algo_moon, &pfl_algo_fedgen, &pfl_algo_fedcross,
                                     /* FL-bench's server optimizers */
                                     &pfl_algo_fedavgm, &pfl_algo_fedadam, &pfl_algo_fedyogi, &pfl_algo_fedadagrad,
                                     &pfl_algo_fedadmm, NULL};

/* Methods registered at run time (pfl_algo_register), after the built-in ones. */
static const pfl_algo *registered[PFL_MAX_REGISTERED];
static int num_registered;

static int num_builtin(void) {
    int n = 0;
    while (pfl_algos[n]) n++;
    return n;
}

int pfl_algo_count(void) { return num_builtin() + num_registered; }

const pfl_algo *pfl_algo_at(int i) {
    const int builtin = num_builtin();
    if (i < 0 || i >= builtin + num_registered) return NULL;
    return i < builtin ? pfl_algos[i] : registered[i - builtin];
}

static const pfl_algo *lookup(const char *name) {
    for (int i = 0; i < pfl_algo_count(); i++)
        if (strcmp(pfl_algo_at(i)->name, name) == 0) return pfl_algo_at(i);
    return NULL;
}

/* Levenshtein distance of a and b, capped at 9 (enough to rank suggestions). */
static int edit_distance(const char *a, const char *b) {
    enum { CAP = 9, MAXLEN = 32 };
    const size_t n = strlen(a), m = strlen(b);
    if (n > MAXLEN || m > MAXLEN) return CAP;
    int row[MAXLEN + 1];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            const int up = row[j], best_side = (up < row[j - 1] ? up : row[j - 1]) + 1;
            const int change = diag + (a[i - 1] != b[j - 1]);
            row[j] = best_side < change ? best_side : change;
            diag = up;
        }
    }
    return row[m] < CAP ? row[m] : CAP;
}

/* An unknown name: the closest method when it is a likely typo, else where
 * the list is (26 names no longer fit the one-line message a caller may
 * prefix with a file and a cell). */
const pfl_algo *pfl_algo_find(const char *name) {
    const pfl_algo *a = lookup(name);
    if (a) return a;
    const pfl_algo *closest = NULL;
    int best = 3; /* at most 2 edits away */
    for (int i = 0; i < pfl_algo_count(); i++) {
        const int d = edit_distance(name, pfl_algo_at(i)->name);
        if (d < best) best = d, closest = pfl_algo_at(i);
    }
    if (closest)
        pfl_err("--algo: unknown algorithm '%s' (did you mean %s? pfl run --help lists all %d)", name, closest->name,
                pfl_algo_count());
    else
        pfl_err("--algo: unknown algorithm '%s' (pfl run --help lists the %d methods)", name, pfl_algo_count());
    return NULL;
}

/* A flag name is what --NAME can spell: lowercase letters, digits and '-'. */
static bool flag_name_ok(const char *name) {
    if (!name || !*name || *name == '-') return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-')) return false;
    return true;
}

static int check_params(const pfl_algo *algo) {
    if (algo->num_params < 0 || (algo->num_params > 0 && !algo->params))
        return pfl_err("method %s: %d parameters but no table", algo->name, algo->num_params);
    for (int i = 0; i < algo->num_params; i++) {
        const pfl_param *p = &algo->params[i];
        if (!flag_name_ok(p->name))
            return pfl_err("method %s: parameter %d: '%s' is not a flag name (a-z, 0-9, '-')", algo->name, i,
                           p->name ? p->name : "(null)");
        if (p->block != PFL_BLOCK_ALGO && p->block != PFL_BLOCK_EXTRA)
            return pfl_err("method %s: --%s: a method's parameter sets pfl_algo_params or the extra store",
                           algo->name, p->name);
        if (p->block == PFL_BLOCK_EXTRA && p->type == PFL_PARAM_STRING)
            return pfl_err("method %s: --%s: the extra store holds numbers only", algo->name, p->name);
        if (p->block == PFL_BLOCK_ALGO && p->offset >= sizeof(pfl_algo_params))
            return pfl_err("method %s: --%s: offset %zu is outside pfl_algo_params", algo->name, p->name, p->offset);
        for (int j = 0; j < i; j++)
            if (!strcmp(algo->params[j].name, p->name))
                return pfl_err("method %s: --%s declared twice", algo->name, p->name);
    }
    return 0;
}

int pfl_algo_register(const pfl_algo *algo) {
    if (!algo || !flag_name_ok(algo->name))
        return pfl_err("pfl_algo_register: a method needs a name of letters, digits and '-'");
    if (lookup(algo->name)) return pfl_err("pfl_algo_register: a method called %s exists already", algo->name);
    if (num_registered == PFL_MAX_REGISTERED)
        return pfl_err("pfl_algo_register: more than %d registered methods", PFL_MAX_REGISTERED);
    if (check_params(algo)) return -1;
    registered[num_registered++] = algo;
    return 0;
}
