/* libFuzzer target: a policy file from arbitrary bytes (src/proxy/policy.c).
 * A file that parses must show (policy_format) as text that parses again to
 * the same rules; a name normalises to a fixed point; deciding never
 * crashes, and a name that is not a host name is always denied.  And the
 * decisions (made through policy.c's pattern index) must equal those of a
 * plain scan over the shown rules written here from docs/policy.md, for
 * each rule's name, a name below it, and the input's first line.
 *
 *   fuzz/run.sh 60 policy */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
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

/* ---- the reference: docs/policy.md's "Deciding", as a plain scan ---- */

struct ref_rule {
	enum policy_action action;
	bool wild;
	unsigned port, labels;
	char name[POLICY_NAME_MAX + 1];
};

static struct ref_rule ref[4096];
static size_t nref;
static enum policy_action ref_default;

static enum policy_action action_of(const char *w)
{
	return !strcmp(w, "allow") ? POLICY_ALLOW : !strcmp(w, "ask") ? POLICY_ASK : POLICY_DENY;
}

/* Reads policy_format's text (comments stripped). */
static bool ref_load(char *text)
{
	char *save = NULL;

	nref = 0;
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char act[8], pat[300], *colon;
		struct ref_rule *r = &ref[nref];
		if (sscanf(l, "%7s %299s", act, pat) != 2)
			abort();
		if (!strcmp(act, "default")) {
			ref_default = action_of(pat);
			continue;
		}
		if (nref == sizeof(ref) / sizeof(ref[0]))
			return false;
		memset(r, 0, sizeof(*r));
		r->action = action_of(act);
		if ((colon = strchr(pat, ':'))) {
			*colon = '\0';
			r->port = (unsigned)atoi(colon + 1);
		}
		r->wild = !strncmp(pat, "*.", 2);
		snprintf(r->name, sizeof(r->name), "%s", pat + (r->wild ? 2 : 0));
		r->labels = 1;
		for (char *c = r->name; *c; c++)
			r->labels += *c == '.';
		nref++;
	}
	return true;
}

static bool ref_matches(const struct ref_rule *r, const char *name)
{
	size_t nl = strlen(name), rl = strlen(r->name);

	if (!r->wild)
		return !strcmp(name, r->name);
	return nl > rl + 1 && name[nl - rl - 1] == '.' && !strcmp(name + nl - rl, r->name);
}

static bool ref_beats(const struct ref_rule *a, size_t ai, const struct ref_rule *b, size_t bi)
{
	if (a->wild != b->wild)
		return !a->wild;
	if (a->labels != b->labels)
		return a->labels > b->labels;
	if (!a->port != !b->port)
		return a->port != 0;
	return ai > bi;
}

static enum policy_action ref_decide(const char *name, unsigned port)
{
	long best = -1;

	for (size_t i = 0; i < nref; i++) {
		/* docs/policy.md: no port is the web ports, for a deny every port. */
		bool covers = ref[i].port ? ref[i].port == port
					  : ref[i].action == POLICY_DENY || port == 443 || port == 80;
		if (!ref_matches(&ref[i], name) || !covers)
			continue;
		if (ref[i].action == POLICY_DENY)
			return POLICY_DENY;
		if (best < 0 || ref_beats(&ref[i], i, &ref[best], (size_t)best))
			best = (long)i;
	}
	return best < 0 ? ref_default : ref[best].action;
}

static void check_decisions(struct policy *p, const char *name)
{
	char norm[POLICY_NAME_MAX + 1];
	unsigned ports[6] = {443, 1, 80, 25, 0, 0};

	if (policy_normalise_name(name, norm, sizeof(norm)))
		return;
	for (size_t i = 0, n = 4; i < nref && n < 6; i++)
		if (ref[i].port && ref_matches(&ref[i], norm))
			ports[n++] = ref[i].port;
	for (int i = 0; i < 6; i++)
		if (ports[i] && policy_decide(p, norm, (uint16_t)ports[i], NULL, 0) != ref_decide(norm, ports[i]))
			abort();
}

static void check_against_reference(struct policy *p, char *shown, const uint8_t *data, size_t size)
{
	char below[POLICY_NAME_MAX + 8], first[300];
	size_t n = 0;

	if (!ref_load(shown))
		return;
	for (size_t i = 0; i < nref && i < 64; i++) {
		check_decisions(p, ref[i].name);
		snprintf(below, sizeof(below), "x.%s", ref[i].name);
		check_decisions(p, below);
	}
	while (n < size && n < sizeof(first) - 1 && data[n] != '\n' && data[n])
		n++;
	memcpy(first, data, n);
	first[n] = '\0';
	check_decisions(p, first);
}

static void check_round_trip(struct policy *p, const uint8_t *data, size_t size)
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
	check_against_reference(p, one, data, size);
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
		check_round_trip(p, data, size);
	else if (!memchr(e.reason, '\0', sizeof(e.reason)) || e.line > size + 1)
		abort();
	check_name(p, data, size);
	policy_free(p);
	return 0;
}
