/* libFuzzer target: an OCI bundle's config.json (oci/spec.h), which
 * `kosa8 oci create` reads from a bundle Docker, containerd or a pod's
 * author wrote, and the process file `kosa8 oci exec --process` reads.
 *
 * Whatever parses must hold together: at least one argument and every
 * list NULL-terminated at its count, argv + env within their byte budget,
 * env entries NAME=value, cwd and every mount destination absolute, the
 * sizes inside kosa8's bounds (vCPUs 1-64, memory a 128 MiB multiple from
 * 256 MiB to 64 GiB), a hostname of [A-Za-z0-9.-], the kosa8 annotations'
 * lists within their counts.  Every refusal says why.  Anything else
 * aborts; oci_spec_free runs on both paths (ASan finds leaks).
 *
 *   fuzz/run.sh 60 oci_spec */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oci/spec.h"

static void check(const struct oci_spec *s)
{
	size_t bytes = 0;

	if (s->nargs < 1 || s->nargs > OCI_ARGS_MAX || s->args[s->nargs] || s->nenv > OCI_ENV_MAX ||
	    s->env[s->nenv])
		abort();
	for (int i = 0; i < s->nargs; i++)
		bytes += strlen(s->args[i]) + 1;
	for (int i = 0; i < s->nenv; i++) {
		bytes += strlen(s->env[i]) + 1;
		if (!strchr(s->env[i], '=') || s->env[i][0] == '=')
			abort();
	}
	if (bytes > OCI_ARGV_ENV_BYTES || s->cwd[0] != '/' || !s->root[0])
		abort();
	if (s->cpus < 1 || s->cpus > OCI_CPUS_MAX || s->mem < OCI_MEM_MIN || s->mem > OCI_MEM_MAX ||
	    s->mem % OCI_MEM_STEP)
		abort();
	if (strspn(s->hostname, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") !=
	    strlen(s->hostname))
		abort();
	if (s->nmounts < 0 || s->nmounts > OCI_MOUNTS_MAX || s->nannotations > OCI_ANNOT_MAX ||
	    s->nallow > OCI_ALLOW_MAX || s->nsecrets > OCI_SECRETS_MAX)
		abort();
	for (int i = 0; i < s->nmounts; i++)
		if (s->mounts[i].dest[0] != '/' || strstr(s->mounts[i].dest, "/../"))
			abort();
	for (int i = 0; i < s->nannotations; i++)
		if (!s->annotations[i].key || !s->annotations[i].value)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct oci_spec s;
	char err[512];

	if (oci_spec_parse((const char *)data, size, &s, err, sizeof(err)) == 0)
		check(&s);
	else if (!err[0])
		abort();
	oci_spec_free(&s);
	/* The same bytes as exec's process file: a process that holds together. */
	err[0] = 0;
	if (oci_process_parse((const char *)data, size, &s, err, sizeof(err)) == 0) {
		s.root[0] = '/';
		check(&s);
	} else if (!err[0]) {
		abort();
	}
	oci_spec_free(&s);
	return 0;
}
