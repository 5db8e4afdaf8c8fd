/* SHA-256 of a one-byte prefix followed by a buffer: the shape of every hash
 * the audit log computes (RFC 9162 leaf hash 0x00 || record, node hash
 * 0x01 || left || right).
 *
 * Why not OpenSSL alone: verifying hashes two short messages per record
 * (about 215 and 65 bytes), and OpenSSL's per-call set-up and buffering cost
 * a third more than the rounds themselves at these sizes.  On x86-64 CPUs
 * with the SHA extensions this file runs the rounds itself, straight from
 * the caller's bytes, and can run two independent messages side by side:
 * the SHA round instructions have a latency several times their issue
 * interval, so a second message fills cycles that one message leaves idle,
 * and on the EPYC this was measured on, four fill them further.
 * Elsewhere it calls OpenSSL.  Results are the same bit for bit
 * (tests/unit/test_audit_hashing.c compares them with OpenSSL's).  What
 * this buys over OpenSSL, measured: bench/results/audit.md, "why kosa8
 * keeps its own SHA-256 rounds" (verify needs 1.5x the CPU without it). */
#ifndef KOSA8_AUDIT_SHA256_H
#define KOSA8_AUDIT_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUDIT_SHA256_LEN 32

/* out = SHA-256(prefix || data[0..len)). */
void audit_sha256_pre(uint8_t prefix, const uint8_t *data, size_t len, uint8_t out[AUDIT_SHA256_LEN]);

/* Two independent hashes with the same prefix, computed together. */
void audit_sha256_pre2(uint8_t prefix, const uint8_t *d0, size_t l0, const uint8_t *d1, size_t l1,
		       uint8_t out0[AUDIT_SHA256_LEN], uint8_t out1[AUDIT_SHA256_LEN]);

/* Four independent hashes with the same prefix, computed together:
 * out[i] = SHA-256(prefix || d[i][0..l[i])). */
void audit_sha256_pre4(uint8_t prefix, const uint8_t *const d[4], const size_t l[4],
		       uint8_t *const out[4]);

/* The implementation in use: "sha-ni" or "openssl". */
const char *audit_sha256_impl(void);

/* Tests: use the CPU's SHA instructions (when it has them) or OpenSSL.
 * Returns false when asked for instructions the CPU lacks. */
bool audit_sha256_use_cpu(bool on);

#endif
