/* SHA-256 (FIPS 180-4): fingerprints of parameter vectors, of the data a
 * run loaded (a checkpoint binds it) and of the metrics rows a checkpoint
 * covers. OpenSSL's libcrypto computes it (its SHA extensions where the CPU
 * has them: a CIFAR-10 digest in a tenth of a second, about 6x a portable
 * C loop); the state lives here by value, so a running digest can be
 * copied and finished while the original goes on. */
#ifndef PFL_UTIL_SHA256_H
#define PFL_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    union { /* libcrypto's SHA256_CTX (112 bytes, checked where it is used); the union aligns it (C99, C++) */
        unsigned char bytes[128];
        uint64_t align;
    } state;
} pfl_sha256;

void pfl_sha256_init(pfl_sha256 *s);
void pfl_sha256_update(pfl_sha256 *s, const void *data, size_t n);
/* Writes the digest as 64 lowercase hex digits and a NUL into hex[65]. */
void pfl_sha256_final_hex(pfl_sha256 *s, char hex[65]);
/* Writes the 32 digest bytes (checkpoints keep them raw). */
void pfl_sha256_final(pfl_sha256 *s, uint8_t digest[32]);

/* Fingerprint of a float vector as little-endian float32 bytes. */
void pfl_sha256_floats_hex(const float *v, size_t n, char hex[65]);

#endif
