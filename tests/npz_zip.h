/* A zip holding one member data.npy stored (method 0), as np.savez writes
 * it: for tests and the npy fuzzing harness, which make data.npy payloads
 * of their own and need a file pfl's reader takes past its CRC check. */
#ifndef PFL_TESTS_NPZ_ZIP_H
#define PFL_TESTS_NPZ_ZIP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

static inline void npz_zip_le(uint8_t *p, uint32_t v, int width) {
    for (int k = 0; k < width; k++) p[k] = (uint8_t)(v >> (8 * k));
}

/* The zip (malloc'd, *size bytes; NULL when out of memory). */
static inline uint8_t *npz_zip_stored(const uint8_t *npy, size_t n, size_t *size) {
    static const char name[] = "data.npy";
    const size_t local = 30 + 8, central = 46 + 8;
    *size = local + n + central + 22;
    uint8_t *z = calloc(*size, 1);
    if (!z) return NULL;
    const uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), npy, (uInt)n);
    npz_zip_le(z, 0x04034b50, 4), npz_zip_le(z + 4, 20, 2), npz_zip_le(z + 14, crc, 4);
    npz_zip_le(z + 18, (uint32_t)n, 4), npz_zip_le(z + 22, (uint32_t)n, 4), npz_zip_le(z + 26, 8, 2);
    memcpy(z + 30, name, 8);
    if (n) memcpy(z + local, npy, n);
    uint8_t *c = z + local + n;
    npz_zip_le(c, 0x02014b50, 4), npz_zip_le(c + 4, 20, 2), npz_zip_le(c + 6, 20, 2), npz_zip_le(c + 16, crc, 4);
    npz_zip_le(c + 20, (uint32_t)n, 4), npz_zip_le(c + 24, (uint32_t)n, 4), npz_zip_le(c + 28, 8, 2);
    memcpy(c + 46, name, 8);
    uint8_t *e = c + central;
    npz_zip_le(e, 0x06054b50, 4), npz_zip_le(e + 8, 1, 2), npz_zip_le(e + 10, 1, 2);
    npz_zip_le(e + 12, (uint32_t)central, 4), npz_zip_le(e + 16, (uint32_t)(local + n), 4);
    return z;
}

#endif
