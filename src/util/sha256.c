#include "util/sha256.h"

#include <stdio.h>
#include <string.h>

/* SHA256_CTX and its three calls are the one way to keep the state by value
 * (EVP's context is opaque and on the heap); OpenSSL 3 keeps them, marked
 * deprecated, with the same assembly (SHA-NI, AVX2) as EVP. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

_Static_assert(sizeof(SHA256_CTX) <= sizeof(((pfl_sha256 *)0)->state.bytes), "pfl_sha256 holds a SHA256_CTX");
_Static_assert(_Alignof(SHA256_CTX) <= _Alignof(uint64_t), "pfl_sha256's state is aligned for a SHA256_CTX");

static SHA256_CTX *ctx(pfl_sha256 *s) { return (SHA256_CTX *)(void *)s->state.bytes; }

void pfl_sha256_init(pfl_sha256 *s) {
    memset(s, 0, sizeof *s);
    SHA256_Init(ctx(s));
}

void pfl_sha256_update(pfl_sha256 *s, const void *data, size_t n) {
    if (n) SHA256_Update(ctx(s), data, n);
}

void pfl_sha256_final(pfl_sha256 *s, uint8_t digest[32]) { SHA256_Final(digest, ctx(s)); }

void pfl_sha256_final_hex(pfl_sha256 *s, char hex[65]) {
    uint8_t digest[32];
    pfl_sha256_final(s, digest);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

/* Little-endian float32 bytes, in chunks (on a little-endian machine the
 * floats as they lie in memory). */
void pfl_sha256_floats_hex(const float *v, size_t n, char hex[65]) {
    pfl_sha256 s;
    pfl_sha256_init(&s);
    enum { CHUNK = 1024 };
    uint8_t le[4 * CHUNK];
    for (size_t at = 0; at < n; at += CHUNK) {
        const size_t k = n - at < CHUNK ? n - at : CHUNK;
        for (size_t i = 0; i < k; i++) {
            uint32_t bits;
            memcpy(&bits, &v[at + i], sizeof bits);
            le[4 * i] = (uint8_t)bits, le[4 * i + 1] = (uint8_t)(bits >> 8);
            le[4 * i + 2] = (uint8_t)(bits >> 16), le[4 * i + 3] = (uint8_t)(bits >> 24);
        }
        pfl_sha256_update(&s, le, 4 * k);
    }
    pfl_sha256_final_hex(&s, hex);
}
