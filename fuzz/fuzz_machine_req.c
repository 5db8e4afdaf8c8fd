/* libFuzzer target: the helper machine's request file (src/machine/req.c),
 * which the machine's server reads from the user's request directory.
 * Whatever parses has an absolute exe and cwd, a command, NAME=VALUE
 * environment entries and strings that lie inside the input; encoding
 * what parsed and parsing it again gives the same request.
 *
 *   fuzz/run.sh 60 machine_req */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "machine/machine.h"

static void check_same(const struct machine_req *a, const struct machine_req *b)
{
	if (strcmp(a->exe, b->exe) || strcmp(a->cwd, b->cwd) || a->tty != b->tty ||
	    (a->tty && (a->rows != b->rows || a->cols != b->cols)) || a->argc != b->argc || a->envc != b->envc)
		abort();
	for (int i = 0; i < a->argc; i++)
		if (strcmp(a->argv[i], b->argv[i]))
			abort();
	for (int i = 0; i < a->envc; i++)
		if (strcmp(a->env[i], b->env[i]))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct machine_req r, again;
	char why[160], *buf = malloc(size ? size : 1), *enc;
	size_t len;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (machine_req_parse(buf, size, &r, why, sizeof(why)) == 0) {
		if (r.exe[0] != '/' || r.cwd[0] != '/' || r.argc < 1 || r.argv[r.argc] || r.env[r.envc])
			abort();
		for (int i = 0; i < r.envc; i++)
			if (!strchr(r.env[i], '=') || r.env[i][0] == '=')
				abort();
		for (int i = 0; i < r.argc; i++)
			if (r.argv[i] < buf || r.argv[i] >= buf + size)
				abort();
		if (machine_req_encode(r.exe, r.cwd, r.tty, r.rows, r.cols, r.argv, r.env, &enc, &len) == 0) {
			if (machine_req_parse(enc, len, &again, why, sizeof(why)))
				abort();
			check_same(&r, &again);
			machine_req_free(&again);
			free(enc);
		}
		machine_req_free(&r);
	} else if (!why[0]) {
		abort(); /* every refusal says why */
	}
	free(buf);
	return 0;
}
