/* RFC 9162 Merkle tree hashing (section 2.1): leaf hash SHA-256(0x00 || leaf),
 * node hash SHA-256(0x01 || left || right), the root of the empty tree is
 * SHA-256 of nothing.  Inclusion and consistency proofs are generated and
 * checked exactly as the RFC's algorithms describe (2.1.3 and 2.1.4). */
#ifndef KOSA8_AUDIT_MERKLE_H
#define KOSA8_AUDIT_MERKLE_H

#include <stddef.h>
#include <stdint.h>

#include "audit/format.h"

/* Longest proof for a tree of up to 2^64 leaves. */
#define MERKLE_MAX_PATH 64

typedef uint8_t merkle_hash[AUDIT_HASH_LEN];

void merkle_leaf_hash(const uint8_t *leaf, size_t len, merkle_hash out);
void merkle_node_hash(const merkle_hash left, const merkle_hash right, merkle_hash out);

/* The right edge of a growing tree: sub[k] is the root of the complete
 * subtree of 2^k leaves that bit k of size stands for.  Adding a leaf costs
 * one node hash on average; the root folds at most 63 more. */
struct merkle_frontier {
	uint64_t size;
	merkle_hash sub[64];
};

void merkle_frontier_init(struct merkle_frontier *f);
void merkle_frontier_add(struct merkle_frontier *f, const merkle_hash leaf_hash);
/* Adds 2^level leaves at once, given the root of their complete subtree;
 * f->size must be a multiple of 2^level (the subtree is then a node of the
 * tree of the whole log). */
void merkle_frontier_add_subtree(struct merkle_frontier *f, unsigned level,
				 const merkle_hash root);
void merkle_frontier_root(const struct merkle_frontier *f, merkle_hash root);

/* MTH(D[0:n]) over leaf hashes. */
void merkle_root(const merkle_hash *leaves, uint64_t n, merkle_hash root);

/* The audit path of leaf `index` in the tree of the first n leaves (RFC 9162
 * 2.1.3.1), leaf level first.  Returns the number of hashes, or -EINVAL. */
int merkle_inclusion_proof(const merkle_hash *leaves, uint64_t n, uint64_t index,
			   merkle_hash path[MERKLE_MAX_PATH]);

/* The consistency proof between the trees of the first m and the first n
 * leaves, 0 < m <= n (RFC 9162 2.1.4.1).  Returns its length or -EINVAL. */
int merkle_consistency_proof(const merkle_hash *leaves, uint64_t n, uint64_t m,
			     merkle_hash path[MERKLE_MAX_PATH]);

/* RFC 9162 2.1.3.2 and 2.1.4.2: 0 when the proof holds, else -EBADMSG. */
int merkle_verify_inclusion(uint64_t index, uint64_t size, const merkle_hash leaf_hash,
			    const merkle_hash *path, size_t count, const merkle_hash root);
int merkle_verify_consistency(uint64_t m, uint64_t n, const merkle_hash old_root,
			      const merkle_hash new_root, const merkle_hash *path, size_t count);

#endif
