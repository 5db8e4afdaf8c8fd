/* libFuzzer target: an export bundle from arbitrary bytes, as `kosa8 audit
 * verify --bundle` reads one from another machine: the bundle parser, then
 * the whole verifier (records, chain, tree, heads, signatures) with the
 * bundle's own key.  Invariants checked on what verifies: the signed root
 * is the Merkle root of the leaves, and every record's inclusion proof
 * against it holds.
 *
 *   fuzz/run.sh 60 audit_bundle */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "audit/bundle.h"
#include "audit/merkle.h"
#include "audit/verify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct audit_bundle b;
	struct audit_verify_result r;
	merkle_hash *leaves = NULL, root, path[MERKLE_MAX_PATH];
	int err, n;

	if (audit_bundle_parse(data, size, &b))
		return 0;
	if (b.log + b.log_len > data + size || b.heads + b.heads_len > data + size)
		abort();
	err = audit_verify(b.log, b.log_len, b.heads, b.heads_len, b.pub, &r, &leaves);
	if (err && err != -EBADMSG)
		abort();
	if (!err && r.have_head) {
		uint64_t size_h = r.last_head.size;
		if (size_h > r.records)
			abort();
		merkle_root(leaves, size_h, root);
		if (memcmp(root, r.last_head.root, sizeof(root)))
			abort();
		for (uint64_t i = 0; i < size_h && i < 64; i++) {
			n = merkle_inclusion_proof(leaves, size_h, i, path);
			if (n < 0 || merkle_verify_inclusion(i, size_h, leaves[i], path, (size_t)n, root))
				abort();
		}
	}
	free(leaves);
	return 0;
}
