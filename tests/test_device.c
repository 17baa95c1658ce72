/* What a device backend changes above the backend, checked without a GPU: a
 * backend that says it is a device but computes with the CPU's functions
 * (the CPU table with `device` set) runs the round loop as a GPU would see
 * it. A method whose step has host-side parts is refused with one line
 * naming it; FedAvg and FedALA (ALA's weight learning reads and writes its
 * window through the executor on a device) run and give the CPU's bits;
 * host memory asked of a device buffer is refused and handed out as a
 * zeroed stand-in; --device names only the backends there are. */
#include <string.h>

#include "algos/algos.h"
#include "backend/backend.h"
#include "check.h"
#include "tiny.h"

static pfl_backend device_like;

static pfl_config config(void) {
    pfl_config c = tiny_config(3);
    c.rounds = 2, c.momentum = 0.5f;
    pfl_modules_config *mod = &c.modules;
    mod->ala_p = 1, mod->ala_s = 80, mod->ala_eta = 1.0f, mod->ala_threshold = 0.1f, mod->ala_max_epochs = 20;
    c.algo.php_mu = 0.9f, c.algo.php_lambda = 0.01f;
    return c;
}

static const int n_train[3] = {12, 9, 7}, n_test[3] = {4, 4, 4};

/* the run's global model after its rounds, or -1 (message in pfl_errmsg) */
static int run(const pfl_algo *algo, const pfl_backend *be, bool ala, float *global) {
    tiny_fed f;
    pfl_config c = config();
    c.backend = be, c.modules.ala = ala;
    tiny_fed_init(&f, algo, c, n_train, n_test);
    const int rc = pfl_fl_run(&f.fl, NULL, NULL);
    if (rc == 0) memcpy(global, f.fl.global, sizeof(float) * pfl_model_vector_len(f.fl.model));
    tiny_fed_free(&f);
    return rc;
}

static void test_same_bits(const pfl_algo *algo, bool ala) {
    pfl_model m;
    if (pfl_model_build(&m, "dnn", 1, 4, 4, 3)) exit(2);
    const size_t V = pfl_model_vector_len(&m);
    float *cpu = tiny_floats(V), *dev = tiny_floats(V);
    CHECK(run(algo, NULL, ala, cpu) == 0, "%s on the CPU: %s", algo->name, pfl_errmsg());
    CHECK(run(algo, &device_like, ala, dev) == 0, "%s on a device: %s", algo->name, pfl_errmsg());
    CHECK(tiny_same(cpu, dev, 0, V), "%s%s: the device run's global model is the CPU's", algo->name,
          ala ? " --ala" : "");
    free(cpu), free(dev);
}

static void test_refused(const pfl_algo *algo, const char *why) {
    float global[4096];
    pfl_err_clear();
    CHECK(run(algo, &device_like, false, global) == -1, "%s is refused on a device", algo->name);
    char expect[200];
    snprintf(expect, sizeof expect, "--device device-like: %s cannot run there (its step has a host-side part: %s",
             algo->name, why);
    CHECK(strstr(pfl_errmsg(), expect) == pfl_errmsg(), "the line names %s and why: %s", algo->name, pfl_errmsg());
    CHECK(!strchr(pfl_errmsg(), '\n'), "one line");
}

/* pfl_exec_host on a device buffer: the refusal, and a zeroed stand-in */
static void test_host_refused(void) {
    pfl_model m;
    if (pfl_model_build(&m, "dnn", 1, 4, 4, 3)) exit(2);
    pfl_exec *x = pfl_exec_create(&device_like, &m, NULL, 4);
    CHECK(x != NULL, "executor");
    if (!x) return;
    CHECK(pfl_exec_refusal(x) == NULL, "nothing refused yet");
    pfl_xbuf b = {.n = 5, .exec = x, .dev = &m}; /* a device buffer: no host memory */
    float *h = pfl_exec_host(&b);
    CHECK(h != NULL && h[0] == 0.0f && h[4] == 0.0f, "a zeroed stand-in");
    CHECK(pfl_exec_refusal(x) && strstr(pfl_exec_refusal(x), "host memory"), "refused: %s",
          pfl_exec_refusal(x) ? pfl_exec_refusal(x) : "(nothing)");
    pfl_exec_refuse(x, "a later reason");
    CHECK(!strstr(pfl_exec_refusal(x), "later"), "the first reason is kept");
    pfl_xbuf cpu = {.host = h, .n = 5};
    CHECK(pfl_exec_host(&cpu) == h, "host memory is itself");
    pfl_exec_destroy(x); /* frees the stand-in (ASan) */
}

static void test_find(void) {
    pfl_err_clear();
    CHECK(pfl_backend_find("cpu") == &pfl_backend_cpu, "cpu");
    CHECK(pfl_backend_find("tpu") == NULL && strstr(pfl_errmsg(), "--device tpu: not a backend of this pfl"),
          "an unknown name: %s", pfl_errmsg());
#ifdef PFL_CUDA
    CHECK(pfl_backend_find("cuda") == &pfl_backend_cuda, "cuda, in a pfl built with it");
    CHECK(!strcmp(pfl_backend_names(), "cpu, cuda"), "the names: %s", pfl_backend_names());
#else
    CHECK(pfl_backend_find("cuda") == NULL && strstr(pfl_errmsg(), "built without the CUDA backend"),
          "cuda without it: %s", pfl_errmsg());
#endif
}

int main(void) {
    device_like = pfl_backend_cpu;
    device_like.name = "device-like", device_like.device = true;
    test_find();
    test_host_refused();
    test_same_bits(&pfl_algo_fedavg, false);
    test_same_bits(&pfl_algo_fedala, false); /* ALA through the executor */
    test_same_bits(&pfl_algo_fedprox, false);
    test_refused(&pfl_algo_fedphp, "fedphp's MMD");
    TEST_MAIN_END();
}
