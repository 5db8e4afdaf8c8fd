/* libFuzzer target: the (id, value) pair records a checkpoint keeps arm64's
 * registers and GIC state in (src/vmm/accel_state.c), read back from a
 * state file anyone may have edited.  Whatever comes in, every pair read
 * lies inside the input, the reader stops at the end or refuses, and the
 * pairs read, written again, give the input's bytes up to where it
 * stopped.
 *
 *   fuzz/run.sh 60 accel_pairs */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/accel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct accel_pairs p = {0};
	const uint8_t *val;
	size_t off = 0, prev = 0;
	uint64_t id;
	int rc;

	while ((rc = accel_pairs_next(data, size, &off, &id, &val)) == 1) {
		size_t n = accel_pair_size(id);
		if (!n || val != data + prev + sizeof(id) || val + n > data + size || off != prev + sizeof(id) + n)
			abort();
		accel_pairs_add(&p, id, val);
		prev = off;
	}
	if (rc != 0 && rc != -22)
		abort();
	if (rc == 0 && off != size)
		abort();
	if (p.err || p.len != prev || (prev && memcmp(p.buf, data, prev)))
		abort();
	free(p.buf);
	return 0;
}
