/* Leaf hashes computed ahead of the verifier by several threads.
 *
 * Verifying is one SHA-256 pass over each record (its leaf hash, which is
 * also its chain link) plus about one node hash per record.  The leaf hashes
 * do not depend on each other, so they are computed a window at a time, the
 * window split between the calling thread and helper threads; the checks
 * themselves (chain, sequence numbers, tree, heads) stay in one thread, in
 * order, exactly as without helpers. */
#ifndef KOSA8_AUDIT_PREHASH_H
#define KOSA8_AUDIT_PREHASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "audit/merkle.h"

struct prehash;

/* Threads to use for a log of len bytes: 1 (no helpers) for small logs or
 * one CPU; $KOSA8_VERIFY_THREADS overrides (1 turns helpers off). */
unsigned prehash_threads(size_t len);

/* Starts threads-1 helpers.  Returns 0, or -ENOMEM / -EAGAIN. */
int prehash_start(struct prehash **ph, unsigned threads);
void prehash_stop(struct prehash *ph);

/* The leaf hash of the record at offset off into out, if known: when the
 * current window is used up, the next one is parsed and hashed from off on.
 * false means: compute it yourself (a record that does not parse, say). */
bool prehash_take(struct prehash *ph, const uint8_t *log, size_t len, uint64_t off,
		  merkle_hash out);

#endif
