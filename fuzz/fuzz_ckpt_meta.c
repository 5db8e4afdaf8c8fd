/* libFuzzer target: a sandbox checkpoint record (sandbox/checkpoints.h),
 * which the supervisor and `kosa8 checkpoints` read from the sandbox's
 * state directory.
 *
 * Whatever parses must hold together: the id is cN or "current", the
 * parent empty or cN, the message printable and bounded, every chain entry
 * an absolute path; formatting it and parsing again gives the same record.
 * Every refusal says why.  Anything else aborts.
 *
 *   fuzz/run.sh 60 ckpt_meta */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/checkpoints.h"

static void check(const struct ckpt_meta *m)
{
	if ((strcmp(m->id, CKPT_CURRENT) && !ckpt_id_valid(m->id)) ||
	    (m->parent[0] && !ckpt_id_valid(m->parent)) || !ckpt_message_valid(m->message) ||
	    (m->top[0] && m->top[0] != '/') || m->nchain < 0 || m->nchain > CKPT_MAX_CHAIN)
		abort();
	for (int i = 0; i < m->nchain; i++)
		if (m->chain[i][0] != '/' || strchr(m->chain[i], '\n'))
			abort();
}

static void check_round_trip(const struct ckpt_meta *m)
{
	struct ckpt_meta again;
	char *text = ckpt_meta_format(m), err[256];

	if (!text)
		return;
	if (ckpt_meta_parse(text, strlen(text), &again, err, sizeof(err)))
		abort();
	if (strcmp(again.id, m->id) || strcmp(again.parent, m->parent) ||
	    strcmp(again.message, m->message) || strcmp(again.top, m->top) ||
	    again.created != m->created || again.memory_bytes != m->memory_bytes ||
	    again.next != m->next || again.nchain != m->nchain)
		abort();
	for (int i = 0; i < m->nchain; i++)
		if (strcmp(again.chain[i], m->chain[i]))
			abort();
	ckpt_meta_free(&again);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ckpt_meta m;
	char err[256];

	err[0] = '\0';
	if (ckpt_meta_parse((const char *)data, size, &m, err, sizeof(err))) {
		if (!err[0])
			abort();
		return 0;
	}
	check(&m);
	check_round_trip(&m);
	ckpt_meta_free(&m);
	return 0;
}
