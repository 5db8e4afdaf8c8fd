/* SHA-256 (FIPS 180-4), streaming: what the VMM hashes (a disk base's
 * contents, a checkpoint's CPUID set) without linking OpenSSL, whose
 * libcrypto alone kept 3.6 MiB of the VMM resident (bench/results/memory.md).
 * The rounds run on the x86 SHA extensions where the CPU has them (the
 * same code the audit log's multi-message hashing uses, sha256_x86.h),
 * else in portable C.  tests/unit/test_sha256.c checks both against the
 * standard's vectors and OpenSSL. */
#ifndef KOSA8_COMMON_SHA256_H
#define KOSA8_COMMON_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

struct sha256 {
	uint32_t h[8];
	uint64_t bytes;  /* hashed so far */
	uint8_t buf[64]; /* a partial block: bytes % 64 of them */
};

void sha256_init(struct sha256 *c);
void sha256_update(struct sha256 *c, const void *data, size_t len);
void sha256_final(struct sha256 *c, uint8_t out[SHA256_LEN]);

/* out = SHA-256(data[0..len)). */
void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN]);

/* The round constants K0..K63 (FIPS 180-4 4.2.2). */
extern const uint32_t sha256_k[64];

/* Whether this CPU has the SHA extensions (and the SSE4.1 they need here). */
bool sha256_cpu_has_ni(void);

/* Tests: run the rounds on the SHA extensions (on, when the CPU has them;
 * false if it lacks them) or in portable C. */
bool sha256_use_ni(bool on);

#endif
