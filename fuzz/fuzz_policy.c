/* libFuzzer target: a policy file from arbitrary bytes (src/proxy/policy.c).
 * A file that parses must show (policy_format) as text that parses again to
 * the same rules; a name normalises to a fixed point; deciding never
 * crashes, and a name that is not a host name is always denied.
 *
 *   fuzz/run.sh 60 policy */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/policy.h"

/* policy_format's text without its "\t# origin:line" comments. */
static void strip_comments(char *s)
{
	char *w = s;

	for (char *r = s; *r;) {
		if (*r == '\t' && r[1] == '#') {
			while (*r && *r != '\n')
				r++;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
}

static void check_round_trip(struct policy *p)
{
	struct policy *q;
	char *one, *two;

	if (policy_format(p, &one))
		abort();
	if (policy_new(&q) || policy_add_text(q, one, strlen(one), "again", NULL) ||
	    policy_format(q, &two))
		abort();
	strip_comments(one);
	strip_comments(two);
	if (strcmp(one, two))
		abort();
	free(one);
	free(two);
	policy_free(q);
}

/* The input's first line as a name: normalising twice changes nothing. */
static void check_name(struct policy *p, const uint8_t *data, size_t size)
{
	char in[300], once[POLICY_NAME_MAX + 1], twice[POLICY_NAME_MAX + 1];
	size_t n = 0;

	while (n < size && n < sizeof(in) - 1 && data[n] != '\n' && data[n])
		n++;
	memcpy(in, data, n);
	in[n] = '\0';
	if (policy_normalise_name(in, once, sizeof(once)) == 0) {
		if (policy_normalise_name(once, twice, sizeof(twice)) || strcmp(once, twice))
			abort();
	} else if (policy_decide(p, in, 443, NULL, 0) != POLICY_DENY ||
		   policy_decide(p, in, 0, NULL, 0) != POLICY_DENY) {
		abort();
	}
	policy_decide(p, in, 0, once, sizeof(once));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct policy_error e;
	struct policy *p;

	if (policy_new(&p))
		abort();
	if (policy_add_text(p, (const char *)data, size, "fuzz", &e) == 0)
		check_round_trip(p);
	else if (!memchr(e.reason, '\0', sizeof(e.reason)) || e.line > size + 1)
		abort();
	check_name(p, data, size);
	policy_free(p);
	return 0;
}
