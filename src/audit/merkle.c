#include "audit/merkle.h"

#include <errno.h>
#include <string.h>

#include "audit/sha256.h"

void merkle_leaf_hash(const uint8_t *leaf, size_t len, merkle_hash out)
{
	audit_sha256_pre(0x00, leaf, len, out);
}

void merkle_node_hash(const merkle_hash left, const merkle_hash right, merkle_hash out)
{
	uint8_t buf[2 * AUDIT_HASH_LEN];

	memcpy(buf, left, AUDIT_HASH_LEN);
	memcpy(buf + AUDIT_HASH_LEN, right, AUDIT_HASH_LEN);
	audit_sha256_pre(0x01, buf, sizeof(buf), out);
}

void merkle_frontier_init(struct merkle_frontier *f)
{
	f->size = 0;
}

void merkle_frontier_add_subtree(struct merkle_frontier *f, unsigned level,
				 const merkle_hash root)
{
	merkle_hash carry;
	unsigned k = level;

	memcpy(carry, root, AUDIT_HASH_LEN);
	/* Like binary addition of 2^level: every 1 bit of size from there up
	 * is a complete subtree that merges with the carry into one twice its
	 * size.  (size is a multiple of 2^level: nothing below to merge.) */
	while (f->size >> k & 1) {
		merkle_node_hash(f->sub[k], carry, carry);
		k++;
	}
	memcpy(f->sub[k], carry, AUDIT_HASH_LEN);
	f->size += 1ULL << level;
}

void merkle_frontier_add(struct merkle_frontier *f, const merkle_hash leaf_hash)
{
	merkle_frontier_add_subtree(f, 0, leaf_hash);
}

void merkle_frontier_root(const struct merkle_frontier *f, merkle_hash root)
{
	merkle_hash acc;
	unsigned k;

	if (f->size == 0) {
		/* SHA-256 of the empty string */
		static const merkle_hash empty = {
			0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4,
			0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b,
			0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55};
		memcpy(root, empty, AUDIT_HASH_LEN);
		return;
	}
	/* The smallest subtree is the right-most; fold leftwards (RFC 9162's
	 * split at the largest power of two below n gives exactly this). */
	k = (unsigned)__builtin_ctzll(f->size);
	memcpy(acc, f->sub[k], AUDIT_HASH_LEN);
	for (k++; k < 64; k++)
		if (f->size >> k & 1)
			merkle_node_hash(f->sub[k], acc, acc);
	memcpy(root, acc, AUDIT_HASH_LEN);
}

void merkle_root(const merkle_hash *leaves, uint64_t n, merkle_hash root)
{
	struct merkle_frontier f;

	merkle_frontier_init(&f);
	for (uint64_t i = 0; i < n; i++)
		merkle_frontier_add(&f, leaves[i]);
	merkle_frontier_root(&f, root);
}

/* Largest power of two strictly below n, n >= 2. */
static uint64_t split_point(uint64_t n)
{
	return 1ULL << (63 - __builtin_clzll(n - 1));
}

static int path_rec(const merkle_hash *d, uint64_t n, uint64_t m, merkle_hash *path, int count)
{
	uint64_t k;

	if (n <= 1)
		return count;
	k = split_point(n);
	if (m < k) {
		count = path_rec(d, k, m, path, count);
		merkle_root(d + k, n - k, path[count]);
	} else {
		count = path_rec(d + k, n - k, m - k, path, count);
		merkle_root(d, k, path[count]);
	}
	return count + 1;
}

int merkle_inclusion_proof(const merkle_hash *leaves, uint64_t n, uint64_t index,
			   merkle_hash path[MERKLE_MAX_PATH])
{
	if (index >= n)
		return -EINVAL;
	return path_rec(leaves, n, index, path, 0);
}

static int subproof(const merkle_hash *d, uint64_t n, uint64_t m, int complete,
		    merkle_hash *path, int count)
{
	uint64_t k;

	if (m == n) {
		if (!complete)
			merkle_root(d, n, path[count++]);
		return count;
	}
	k = split_point(n);
	if (m <= k) {
		count = subproof(d, k, m, complete, path, count);
		merkle_root(d + k, n - k, path[count]);
	} else {
		count = subproof(d + k, n - k, m - k, 0, path, count);
		merkle_root(d, k, path[count]);
	}
	return count + 1;
}

int merkle_consistency_proof(const merkle_hash *leaves, uint64_t n, uint64_t m,
			     merkle_hash path[MERKLE_MAX_PATH])
{
	if (m == 0 || m > n)
		return -EINVAL;
	return subproof(leaves, n, m, 1, path, 0);
}

int merkle_verify_inclusion(uint64_t index, uint64_t size, const merkle_hash leaf_hash,
			    const merkle_hash *path, size_t count, const merkle_hash root)
{
	uint64_t fn = index, sn;
	merkle_hash r;

	if (index >= size)
		return -EBADMSG;
	sn = size - 1;
	memcpy(r, leaf_hash, AUDIT_HASH_LEN);
	for (size_t i = 0; i < count; i++) {
		if (sn == 0)
			return -EBADMSG;
		if ((fn & 1) || fn == sn) {
			merkle_node_hash(path[i], r, r);
			while (!(fn & 1) && fn != 0) {
				fn >>= 1;
				sn >>= 1;
			}
		} else {
			merkle_node_hash(r, path[i], r);
		}
		fn >>= 1;
		sn >>= 1;
	}
	return sn == 0 && !memcmp(r, root, AUDIT_HASH_LEN) ? 0 : -EBADMSG;
}

int merkle_verify_consistency(uint64_t m, uint64_t n, const merkle_hash old_root,
			      const merkle_hash new_root, const merkle_hash *path, size_t count)
{
	uint64_t fn, sn;
	merkle_hash fr, sr;
	size_t i = 0;

	if (m > n)
		return -EBADMSG;
	if (m == n)
		return count == 0 && !memcmp(old_root, new_root, AUDIT_HASH_LEN) ? 0 : -EBADMSG;
	if (m == 0)
		return count == 0 ? 0 : -EBADMSG; /* every tree extends the empty one */
	if (count == 0)
		return -EBADMSG;
	/* RFC 9162 2.1.4.2 step 2: for a power-of-two m the old root is itself
	 * the first node of the proof. */
	if ((m & (m - 1)) == 0) {
		memcpy(fr, old_root, AUDIT_HASH_LEN);
	} else {
		memcpy(fr, path[0], AUDIT_HASH_LEN);
		i = 1;
	}
	memcpy(sr, fr, AUDIT_HASH_LEN);
	fn = m - 1;
	sn = n - 1;
	while (fn & 1) {
		fn >>= 1;
		sn >>= 1;
	}
	for (; i < count; i++) {
		if (sn == 0)
			return -EBADMSG;
		if ((fn & 1) || fn == sn) {
			merkle_node_hash(path[i], fr, fr);
			merkle_node_hash(path[i], sr, sr);
			while (!(fn & 1) && fn != 0) {
				fn >>= 1;
				sn >>= 1;
			}
		} else {
			merkle_node_hash(sr, path[i], sr);
		}
		fn >>= 1;
		sn >>= 1;
	}
	if (sn != 0 || memcmp(fr, old_root, AUDIT_HASH_LEN) || memcmp(sr, new_root, AUDIT_HASH_LEN))
		return -EBADMSG;
	return 0;
}
