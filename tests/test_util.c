/* Random streams and SHA-256 against known answers. */
#include <string.h>

#include "check.h"
#include "util/err.h"
#include "util/md5.h"
#include "util/rng.h"
#include "util/sha256.h"

static void sha_hex(const char *msg, char hex[65]) {
    pfl_sha256 s;
    pfl_sha256_init(&s);
    pfl_sha256_update(&s, msg, strlen(msg));
    pfl_sha256_final_hex(&s, hex);
}

/* RFC 1321's test suite, and a million 'a' in uneven pieces */
static void test_md5_vectors(void) {
    const char *msg[7] = {"", "a", "abc", "message digest", "abcdefghijklmnopqrstuvwxyz",
                          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                          "12345678901234567890123456789012345678901234567890123456789012345678901234567890"};
    const char *want[7] = {"d41d8cd98f00b204e9800998ecf8427e", "0cc175b9c0f1b6a831c399e269772661",
                           "900150983cd24fb0d6963f7d28e17f72", "f96b697d7cb7938d525a2f31aaf161d0",
                           "c3fcd3d76192e4007dfb496cca67e13b", "d174ab98d277d9f5a5611c2c9f419d9f",
                           "57edf4a22be3c955ac49da2e2107b67a"};
    char hex[33];
    for (int i = 0; i < 7; i++) {
        pfl_md5 s;
        pfl_md5_init(&s);
        pfl_md5_update(&s, msg[i], strlen(msg[i]));
        pfl_md5_final_hex(&s, hex);
        CHECK(strcmp(hex, want[i]) == 0, "md5(\"%s\") = %s, want %s", msg[i], hex, want[i]);
    }
    pfl_md5 s;
    pfl_md5_init(&s);
    char chunk[997];
    memset(chunk, 'a', sizeof chunk);
    for (size_t left = 1000000; left;) {
        size_t n = left < sizeof chunk ? left : sizeof chunk;
        pfl_md5_update(&s, chunk, n);
        left -= n;
    }
    pfl_md5_final_hex(&s, hex);
    CHECK(strcmp(hex, "7707d6ae4e027c70eea2a935c2296f21") == 0, "md5 of a million a: %s", hex);
}

/* pfl_quote: bytes from a file shown in one printable line */
static void test_quote(void) {
    char buf[64];
    CHECK(strcmp(pfl_quote(buf, sizeof buf, "a\\b\0\n\xff z", 8, 20), "a\\\\b\\x00\\x0a\\xff z") == 0, "escapes: %s", buf);
    CHECK(strcmp(pfl_quote(buf, sizeof buf, "abcdef", 6, 3), "abc...") == 0, "at most max bytes: %s", buf);
    CHECK(strcmp(pfl_quote(buf, 8, "\x01\x02\x03", 3, 3), "\\x01") == 0, "cut to the buffer at a whole escape: %s", buf);
    CHECK(strcmp(pfl_quote(buf, sizeof buf, "", 0, 5), "") == 0, "empty: %s", buf);
}

/* A message is one line whatever it quotes: a stored flag holding ESC or a
 * line break cannot break the terminal's line or forge a second one. */
static void test_messages_are_one_line(void) {
    pfl_err("--data: '%s' unknown", "x\n[pfl] forged\x1b[2J\x7f");
    CHECK(strcmp(pfl_errmsg(), "--data: 'x?[pfl] forged?[2J?' unknown") == 0, "control characters: %s", pfl_errmsg());
    pfl_err("%s", "tab\there");
    pfl_err_prefix("pre\nfix");
    CHECK(strcmp(pfl_errmsg(), "pre?fix: tab?here") == 0, "a prefix too: %s", pfl_errmsg());
}

static void test_sha256_vectors(void) {
    char hex[65];
    sha_hex("", hex);
    CHECK(strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0, "%s", hex);
    sha_hex("abc", hex);
    CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0, "%s", hex);
    sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", hex);
    CHECK(strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0, "%s", hex);
    /* one million 'a' fed in uneven pieces exercises block boundaries */
    pfl_sha256 s;
    pfl_sha256_init(&s);
    char chunk[997];
    memset(chunk, 'a', sizeof chunk);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof chunk ? left : sizeof chunk;
        pfl_sha256_update(&s, chunk, n);
        left -= n;
    }
    pfl_sha256_final_hex(&s, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0, "%s", hex);
    /* floats hash as their little-endian bytes: 1.0f is 00 00 80 3f */
    float one = 1.0f;
    char a[65], b[65];
    pfl_sha256_floats_hex(&one, 1, a);
    pfl_sha256_init(&s);
    pfl_sha256_update(&s, "\x00\x00\x80\x3f", 4);
    pfl_sha256_final_hex(&s, b);
    CHECK(strcmp(a, b) == 0, "%s vs %s", a, b);
}

static void test_streams_are_keyed(void) {
    pfl_rng a = pfl_rng_stream(1, 2, 3, PFL_RNG_SHUFFLE), b = pfl_rng_stream(1, 2, 3, PFL_RNG_SHUFFLE);
    int same = 1;
    for (int i = 0; i < 100; i++) same &= pfl_rng_next(&a) == pfl_rng_next(&b);
    CHECK(same, "same key, same stream");
    pfl_rng keys[5] = {pfl_rng_stream(1, 2, 3, PFL_RNG_SHUFFLE), pfl_rng_stream(2, 2, 3, PFL_RNG_SHUFFLE),
                       pfl_rng_stream(1, 3, 3, PFL_RNG_SHUFFLE), pfl_rng_stream(1, 2, 4, PFL_RNG_SHUFFLE),
                       pfl_rng_stream(1, 2, 3, PFL_RNG_DROPOUT)};
    uint64_t first[5];
    for (int i = 0; i < 5; i++) first[i] = pfl_rng_next(&keys[i]);
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++) CHECK(first[i] != first[j], "keys %d and %d collide", i, j);
}

static void test_distributions(void) {
    pfl_rng r = pfl_rng_stream(7, PFL_RNG_NONE, PFL_RNG_NONE, PFL_RNG_BENCH);
    const int n = 200000;
    double sum = 0, sum2 = 0, gsum = 0, gsmall = 0, umin = 1, umax = 0;
    int counts[7] = {0};
    for (int i = 0; i < n; i++) {
        double u = pfl_rng_uniform(&r);
        umin = u < umin ? u : umin, umax = u > umax ? u : umax;
        double z = pfl_rng_normal(&r);
        sum += z, sum2 += z * z;
        gsum += pfl_rng_gamma(&r, 2.5);
        gsmall += pfl_rng_gamma(&r, 0.1);
        counts[pfl_rng_below(&r, 7)]++;
    }
    CHECK(umin >= 0.0 && umax < 1.0 && umin < 1e-4 && umax > 1 - 1e-4, "uniform range [%g, %g]", umin, umax);
    /* tolerances: about 5 standard errors of each estimate */
    CHECK(fabs(sum / n) < 0.012, "normal mean %f", sum / n);
    CHECK(fabs(sum2 / n - 1.0) < 0.02, "normal var %f", sum2 / n);
    CHECK(fabs(gsum / n - 2.5) < 0.02, "gamma(2.5) mean %f", gsum / n);
    CHECK(fabs(gsmall / n - 0.1) < 0.01, "gamma(0.1) mean %f", gsmall / n);
    for (int k = 0; k < 7; k++) CHECK(fabs(counts[k] / (double)n - 1.0 / 7) < 0.005, "below(7) bucket %d", k);
}

static void test_shuffle_is_permutation(void) {
    pfl_rng r = pfl_rng_stream(3, 0, 0, PFL_RNG_SHUFFLE);
    int idx[100], seen[100] = {0};
    for (int i = 0; i < 100; i++) idx[i] = i;
    pfl_rng_shuffle(&r, idx, 100);
    int moved = 0;
    for (int i = 0; i < 100; i++) seen[idx[i]]++, moved += idx[i] != i;
    int ok = 1;
    for (int i = 0; i < 100; i++) ok &= seen[i] == 1;
    CHECK(ok, "shuffle lost or duplicated an index");
    CHECK(moved > 80, "shuffle barely moved anything (%d)", moved);
}

int main(void) {
    test_md5_vectors();
    test_quote();
    test_messages_are_one_line();
    test_sha256_vectors();
    test_streams_are_keyed();
    test_distributions();
    test_shuffle_is_permutation();
    TEST_MAIN_END();
}
