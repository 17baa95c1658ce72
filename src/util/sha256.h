/* SHA-256 (FIPS 180-4), used to fingerprint parameter vectors. */
#ifndef PFL_UTIL_SHA256_H
#define PFL_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t length;     /* bytes hashed so far */
    uint8_t block[64];
    size_t used;         /* bytes waiting in block */
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
