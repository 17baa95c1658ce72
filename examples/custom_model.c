/* A model written outside pfl: a small CNN, conv 5x5 of 8 channels, ReLU,
 * 2x2 max pooling and one Linear to the classes, registered as "tiny-cnn"
 * and trained with any of pfl's methods.
 *
 *   cc custom_model.c $(pkg-config --cflags --libs pfl) -o custom_model
 *   ./custom_model --algo fedper --data mnist --rounds 2
 *
 * The command line is pfl run's, with --model tiny-cnn by default. On MNIST
 * (1x28x28, 10 classes) the model has 8*25+8 + 8*12*12*10+10 = 11,738
 * parameters in two layers (conv1, fc): --head-layers 1 is fc. */
#include <stdio.h>
#include <stdlib.h>

#include <pfl.h>

/* Called with a model begun for the data's input shape and classes
 * (m->in_c, m->in_h, m->in_w, m->classes); pfl finishes it. Layer names
 * become the tensors' ("conv1.weight", "conv1.bias", ...). */
static int build_tiny_cnn(pfl_model *m) {
    if (pfl_model_conv(m, "conv1", 8, 5, 1, 0, true) || pfl_model_relu(m) || pfl_model_maxpool(m, 2, 2, 0) ||
        pfl_model_flatten(m) || pfl_model_linear(m, "fc", m->classes))
        return -1;
    return 0;
}

static const pfl_model_def tiny_cnn = {.name = "tiny-cnn", .build = build_tiny_cnn, .batchnorm = false};

int main(int argc, char **argv) {
    pfl_init(argv); /* first: the BLAS kernels the pfl command computes with (run/run.h) */
    if (pfl_model_register(&tiny_cnn)) {
        fprintf(stderr, "custom_model: %s\n", pfl_errmsg());
        return 1;
    }
    char **args = malloc(sizeof(char *) * (size_t)argc);
    if (!args) return 1;
    args[0] = "--model=tiny-cnn"; /* a later --model wins */
    for (int i = 1; i < argc; i++) args[i] = argv[i];
    pfl_run_options o;
    if (pfl_run_options_parse(&o, argc, args, false)) {
        fprintf(stderr, "custom_model: %s\n", pfl_errmsg());
        free(args);
        return 2;
    }
    int rc = pfl_run(&o, NULL);
    if (rc) fprintf(stderr, "custom_model: %s\n", pfl_errmsg());
    free(args);
    return rc ? 1 : 0;
}
