/* server/tenants/sha256.h: SHA-256 (FIPS 180-4), for API keys: the config holds
 * keys' hashes only, and a presented key is hashed before it is compared.
 * Pure functions; any thread. */
#ifndef COLO_SERVER_SHA256_H
#define COLO_SERVER_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* out = SHA-256(data[0..len)). */
void colo_sha256(const void *data, size_t len, uint8_t out[32]);
/* 64 lower-case hex digits and a NUL into hex. */
void colo_sha256_hex(const uint8_t digest[32], char hex[65]);
/* a == b in time independent of where they differ. */
bool colo_sha256_equal(const uint8_t a[32], const uint8_t b[32]);

#endif
