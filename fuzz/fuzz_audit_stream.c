/* libFuzzer target, differential: the streamed verifier (audit_verify_fd,
 * what `kosa8 audit verify` runs: reads through a buffer, windows, helper
 * threads, a re-walk over a mapping to name a problem) against the
 * in-memory one (audit_verify) on the same log, heads and key, taken from
 * an export bundle.  Both must give the same verdict, the same first bad
 * record, the same counts and the same root.
 *
 *   fuzz/run.sh 60 audit_stream */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "audit/bundle.h"
#include "audit/verify.h"
#include "common/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	struct audit_bundle b;
	struct audit_verify_result m, s;
	int em, es;

	if (audit_bundle_parse(data, size, &b))
		return 0;
	if (fd < 0 && (fd = memfd_create("fuzz-audit-log", MFD_CLOEXEC)) < 0)
		abort();
	if (ftruncate(fd, 0) < 0 || pwrite(fd, b.log, b.log_len, 0) != (ssize_t)b.log_len)
		abort();
	/* one and two threads: the helpers must not change any answer */
	setenv("KOSA8_VERIFY_THREADS", size & 1 ? "2" : "1", 1);
	em = audit_verify(b.log, b.log_len, b.heads, b.heads_len, b.pub, &m, NULL);
	es = audit_verify_fd(fd, b.log_len, b.heads, b.heads_len, b.pub, &s, NULL);
	if (em != es || m.problem != s.problem || m.records != s.records || m.heads != s.heads ||
	    m.torn_tail != s.torn_tail)
		abort();
	if (em == -EBADMSG && (m.bad_seq != s.bad_seq || m.bad_offset != s.bad_offset ||
			       m.bad_head != s.bad_head))
		abort();
	if (!em && memcmp(m.root, s.root, sizeof(m.root)))
		abort();
	return 0;
}
