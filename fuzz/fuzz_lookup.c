/* libFuzzer target: a remembered answer (sandbox/lookup.h), which `kosa8
 * create` and `run` read from the state directory's cache/.
 *
 * Whatever is accepted must be an answer that fits, with no newline, and
 * must be what the store writes for the same entries: checking it again
 * gives the same answer.  Anything else aborts.
 *
 *   fuzz/run.sh 60 lookup */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/lookup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char a[LOOKUP_ANSWER_MAX], b[LOOKUP_ANSWER_MAX];

	if (size > LOOKUP_FILE_MAX || lookup_check((const char *)data, size, a, sizeof(a)))
		return 0;
	if (strlen(a) >= sizeof(a) || strchr(a, '\n') ||
	    lookup_check((const char *)data, size, b, sizeof(b)) || strcmp(a, b))
		abort();
	return 0;
}
