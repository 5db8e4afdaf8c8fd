/* The hashing half of the verifier, a window of records at a time.
 *
 * Verifying costs one leaf hash per record (also its chain link), about one
 * node hash per record (the tree) and one Ed25519 check per signed head.
 * None of that depends on the checks, so for a window of up to
 * PREHASH_WINDOW records this computes every leaf hash, every node of the
 * log's tree whose leaves all lie in the window, and the signature of every
 * head that ends in the window: hashes four (or two) messages at a time (sha256.h),
 * the work shared with helper threads when there are idle CPUs.  The checks
 * (sequence numbers, chain, roots, order) stay in the caller's thread, in
 * order; a head's root folds the frontier before the window with at most
 * two nodes per level of the window (prehash_extend). */
#ifndef KOSA8_AUDIT_PREHASH_H
#define KOSA8_AUDIT_PREHASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "audit/format.h"
#include "audit/merkle.h"

/* 4096 records, about 1 MB of typical records and 256 KiB of hashes: the
 * window stays in the caches between hashing and the checks that follow. */
#define PREHASH_WINDOW_LOG 12
#define PREHASH_WINDOW (1u << PREHASH_WINDOW_LOG)

struct prehash;

/* One window: the n records at positions first .. first+n-1, each whole and
 * well-formed (the first one that is not, or the end of the bytes given,
 * ends the window). */
struct prehash_window {
	uint64_t first;
	size_t n;
	const uint8_t *bytes; /* the caller's bytes, starting at log offset base */
	uint64_t base;
	const uint64_t *off;  /* log offset of each record */
	const uint64_t *seq;  /* its sequence number field */
	const uint32_t *len;
	const merkle_hash *leaf; /* leaf hash of each record */
	/* level k: the nodes j with lo[k] <= j < lo[k] + count[k] of the log's
	 * tree at height k (node j covers leaves j*2^k .. (j+1)*2^k-1) */
	const merkle_hash *level[PREHASH_WINDOW_LOG + 1];
	uint64_t lo[PREHASH_WINDOW_LOG + 1];
	size_t count[PREHASH_WINDOW_LOG + 1];
};

/* Threads to use for a log of len bytes: 1 (no helpers) for small logs or
 * no idle CPU; $KOSA8_VERIFY_THREADS overrides (1 turns helpers off). */
unsigned prehash_threads(size_t len);

/* Starts threads-1 helpers (fewer if some cannot start).  heads (sorted by
 * size, nheads of them) are checked against pub as their windows come; the
 * arrays must outlive ph.  Returns 0 or -ENOMEM. */
int prehash_start(struct prehash **ph, unsigned threads, const struct audit_head *heads,
		  size_t nheads, const uint8_t pub[AUDIT_PUBKEY_LEN]);
void prehash_stop(struct prehash *ph);

/* Frames up to PREHASH_WINDOW records from bytes[0..len) (log offset base)
 * as the records at positions first.., and hashes them.  The window stays
 * valid until the next call. */
void prehash_fill(struct prehash *ph, const uint8_t *bytes, size_t len, uint64_t base,
		  uint64_t first, struct prehash_window *w);

/* Extends f, the frontier of the records before the window (f->size ==
 * w->first), by the window's first t records, t <= w->n. */
void prehash_extend(const struct prehash_window *w, size_t t, struct merkle_frontier *f);

/* Head i's signature: 0 valid, -EBADMSG not, computed now if no window has
 * checked it. */
int prehash_head_sig(struct prehash *ph, size_t i);

#endif
