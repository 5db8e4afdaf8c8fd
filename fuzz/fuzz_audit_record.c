/* libFuzzer target: one audit record and one head line from arbitrary bytes
 * (src/audit/format.c).  Whatever parses must lie inside the input and
 * re-encode to the very same bytes; anything else aborts.
 *
 *   fuzz/run.sh 60 audit_record */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "audit/format.h"

static void check_record(const uint8_t *data, size_t size)
{
	struct audit_record r;
	char sb[AUDIT_NAME_MAX + 1], ac[AUDIT_NAME_MAX + 1], ty[AUDIT_NAME_MAX + 1], *det;
	uint8_t *again;
	int n = audit_record_parse(data, size, &r), m;

	if (n <= 0)
		return;
	if ((size_t)n > size || r.len != (uint32_t)n || r.raw != data ||
	    r.details + r.details_len > (const char *)data + n)
		abort();
	/* A record the writer accepts (valid JSON details) re-encodes to itself. */
	if (!audit_record_details_valid(&r) || memchr(r.details, 0, r.details_len) ||
	    memchr(r.sandbox, 0, r.sandbox_len) || memchr(r.actor, 0, r.actor_len) ||
	    memchr(r.type, 0, r.type_len))
		return;
	memcpy(sb, r.sandbox, r.sandbox_len);
	sb[r.sandbox_len] = '\0';
	memcpy(ac, r.actor, r.actor_len);
	ac[r.actor_len] = '\0';
	memcpy(ty, r.type, r.type_len);
	ty[r.type_len] = '\0';
	det = strndup(r.details, r.details_len);
	again = malloc((size_t)n);
	{
		struct audit_event ev = {sb, ac, ty, det};
		int c = audit_event_check(&ev);
		/* the writer is stricter than the parser (UTF-8, no raw
		 * controls in details); what it takes must be this record */
		if (c < 0) {
			free(again);
			free(det);
			return;
		}
		if (c != n)
			abort();
		m = audit_record_encode(again, (size_t)n, r.seq, r.time_ns, r.prev, &ev);
		if (m != n || memcmp(again, data, (size_t)n))
			abort();
	}
	free(again);
	free(det);
}

static void check_head(const uint8_t *data, size_t size)
{
	struct audit_head h;
	char line[AUDIT_HEAD_LINE_MAX];
	int n = audit_head_parse((const char *)data, size, &h);

	if (n <= 0)
		return;
	if ((size_t)n > size)
		abort();
	/* One spelling per head: formatting gives back the input line. */
	if (audit_head_format(&h, line, sizeof(line)) != n || memcmp(line, data, (size_t)n))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct audit_header hdr;

	check_record(data, size);
	check_head(data, size);
	audit_header_parse(data, size, &hdr);
	return 0;
}
