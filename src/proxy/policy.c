/* Egress policy: parsing the policy file format (docs/policy.md) and
 * deciding name:port.  Every name, in a rule or in a question, is brought to
 * one spelling first (policy_normalise_name), so matching is a comparison of
 * whole labels: "*.example.com" can never match "badexample.com" or
 * "example.com.evil.net". */
#include "proxy/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* A policy is meant to be read by a person; a file with more rules than this
 * is a mistake (or an attack on the parser), not a policy. */
#define POLICY_MAX_RULES 65536
#define POLICY_FILE_MAX (1 * MiB)

struct rule {
	enum policy_action action;
	bool wildcard;          /* "*.name": names strictly below name */
	uint16_t port;          /* 0: none given (web ports; a deny: every port) */
	uint16_t labels;        /* labels in name: how specific the rule is */
	unsigned line;
	uint32_t origin;        /* index into policy->origins */
	int32_t next;           /* the next rule with the same pattern, or -1 */
	char name[POLICY_NAME_MAX + 1];
};

struct policy {
	pthread_rwlock_t lock;
	struct rule *rules;     /* in the order they were added */
	size_t nrules, cap;
	char **origins;         /* file names rules came from */
	size_t norigins;
	enum policy_action dflt;
	int dflt_origin;        /* -1: built in */
	unsigned dflt_line;
	/* Patterns (wildcard flag + name) -> the newest rule with that pattern,
	 * chained through rule.next; open addressing, -1 is empty.  A decision
	 * looks up the name and each of its suffixes: O(labels), whatever the
	 * number of rules. */
	int32_t *index;
	size_t icap;            /* a power of two, over twice nrules */
};

const char *policy_action_name(enum policy_action a)
{
	switch (a) {
	case POLICY_ALLOW: return "allow";
	case POLICY_ASK: return "ask";
	default: return "deny";
	}
}

int policy_new(struct policy **out)
{
	struct policy *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	if (pthread_rwlock_init(&p->lock, NULL)) {
		free(p);
		return -ENOMEM;
	}
	p->dflt = POLICY_DENY;
	p->dflt_origin = -1;
	*out = p;
	return 0;
}

void policy_free(struct policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->norigins; i++)
		free(p->origins[i]);
	free(p->origins);
	free(p->rules);
	free(p->index);
	pthread_rwlock_destroy(&p->lock);
	free(p);
}

/* ---- names ---- */

static bool is_ldh(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

/* An IPv4 address in any spelling inet_aton takes ("127.1", "0x7f.1",
 * "2130706433") would pass the label syntax; an all-digit last label is
 * never a real top-level domain (RFC 3696 2), so such names are refused. */
static bool looks_like_ipv4(const char *name)
{
	const char *last = strrchr(name, '.');
	struct in_addr a;
	bool digits = true;

	last = last ? last + 1 : name;
	for (const char *c = last; *c; c++)
		digits = digits && *c >= '0' && *c <= '9';
	return digits || inet_aton(name, &a);
}

/* Normalises in into out; NULL on success, else why it is not a host name. */
static const char *normalise(const char *in, char *out, size_t outlen)
{
	size_t len = strlen(in), label = 0;

	if (len > 0 && in[len - 1] == '.')
		len--; /* the root's dot: "example.com." is "example.com" */
	if (len == 0)
		return "empty host name";
	if (len > POLICY_NAME_MAX)
		return "host name longer than 253 characters";
	if (outlen < len + 1)
		return "host name too long for its buffer";
	if (strchr(in, ':') || in[0] == '[')
		return "an IPv6 address, not a host name";
	for (size_t i = 0; i < len; i++) {
		char c = in[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c == '.') {
			if (label == 0)
				return "empty label (two dots, or a leading dot)";
			if (out[i - 1] == '-')
				return "a label ends with '-'";
			label = 0;
		} else if (!is_ldh(c)) {
			return (unsigned char)c >= 0x80 ?
				       "non-ASCII name: write it as its xn-- A-label (IDNA)" :
				       "only letters, digits, '-' and '.' make a host name";
		} else {
			if (label == 0 && c == '-')
				return "a label starts with '-'";
			if (++label > 63)
				return "a label is longer than 63 characters";
		}
		out[i] = c;
	}
	out[len] = '\0';
	if (out[len - 1] == '-')
		return "a label ends with '-'";
	if (looks_like_ipv4(out))
		return "an IP address, not a host name (policy is by name)";
	return NULL;
}

int policy_normalise_name(const char *in, char *out, size_t outlen)
{
	return normalise(in, out, outlen) ? -EINVAL : 0;
}

static uint16_t count_labels(const char *name)
{
	uint16_t n = 1;

	for (; *name; name++)
		n += *name == '.';
	return n;
}

/* ---- parsing ---- */

struct parse {
	struct rule *rules;
	size_t n, cap, base;    /* base: rules p holds already (for the limit) */
	bool has_default;
	enum policy_action dflt;
	unsigned dflt_line;
	struct policy_error *err;
	const char *origin;
};

__attribute__((format(printf, 3, 4)))
static int perr(struct parse *ps, unsigned line, const char *fmt, ...)
{
	va_list ap;

	if (ps->err) {
		snprintf(ps->err->file, sizeof(ps->err->file), "%s", ps->origin);
		ps->err->line = line;
		va_start(ap, fmt);
		vsnprintf(ps->err->reason, sizeof(ps->err->reason), fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

int policy_parse_port(const char *s, uint16_t *port)
{
	unsigned long v = 0;

	if (!*s || strlen(s) > 5)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(*s - '0');
	}
	if (v == 0 || v > 65535)
		return -EINVAL;
	*port = (uint16_t)v;
	return 0;
}

/* One pattern: "host", "*.suffix", either with ":port". */
static int parse_pattern(struct parse *ps, unsigned line, enum policy_action act, char *pat)
{
	struct rule r = {.action = act, .line = line};
	char *colon = strrchr(pat, ':'), *host = pat;
	const char *why;

	if (strchr(pat, '[') || (colon && strchr(pat, ':') != colon))
		return perr(ps, line, "'%.60s': an IPv6 address, not a host name (policy is by name)", pat);
	if (colon) {
		*colon = '\0';
		if (policy_parse_port(colon + 1, &r.port))
			return perr(ps, line, "'%.20s' is not a port (1-65535)", colon + 1);
	}
	if (!strcmp(host, "*"))
		return perr(ps, line, "'*' alone would match every name: list the hosts, or use 'default ask'");
	if (!strncmp(host, "*.", 2)) {
		r.wildcard = true;
		host += 2;
	}
	if (strchr(host, '*'))
		return perr(ps, line, "'%.60s': '*' may only be the whole first label, as in *.example.com", pat);
	if ((why = normalise(host, r.name, sizeof(r.name))))
		return perr(ps, line, "'%.60s' is not a host name: %s", host, why);
	r.labels = count_labels(r.name);
	if (ps->base + ps->n >= POLICY_MAX_RULES)
		return perr(ps, line, "more than %d rules", POLICY_MAX_RULES);
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? ps->cap * 2 : 16;
		struct rule *nr = realloc(ps->rules, cap * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		ps->rules = nr;
		ps->cap = cap;
	}
	ps->rules[ps->n++] = r;
	return 0;
}

static int parse_action(const char *w, enum policy_action *a)
{
	if (!strcmp(w, "allow"))
		*a = POLICY_ALLOW;
	else if (!strcmp(w, "deny"))
		*a = POLICY_DENY;
	else if (!strcmp(w, "ask"))
		*a = POLICY_ASK;
	else
		return -EINVAL;
	return 0;
}

static int parse_default(struct parse *ps, unsigned line, char **save)
{
	char *w = strtok_r(NULL, " \t\r", save);

	if (ps->has_default)
		return perr(ps, line, "a second 'default' (the first is on line %u)", ps->dflt_line);
	if (!w || (strcmp(w, "deny") && strcmp(w, "ask")))
		return perr(ps, line, "'default' takes 'deny' or 'ask'");
	if (strtok_r(NULL, " \t\r", save))
		return perr(ps, line, "'default' takes one word");
	ps->has_default = true;
	ps->dflt = !strcmp(w, "ask") ? POLICY_ASK : POLICY_DENY;
	ps->dflt_line = line;
	return 0;
}

/* One line, comment already cut off; modified in place. */
static int parse_line(struct parse *ps, unsigned line, char *text)
{
	char *save = NULL, *w = strtok_r(text, " \t\r", &save);
	enum policy_action act;
	int err, n = 0;

	if (!w)
		return 0;
	if (!strcmp(w, "default"))
		return parse_default(ps, line, &save);
	if (parse_action(w, &act))
		return perr(ps, line, "'%.40s': a line starts with allow, deny, ask or default", w);
	while ((w = strtok_r(NULL, " \t\r", &save))) {
		if ((err = parse_pattern(ps, line, act, w)))
			return err;
		n++;
	}
	if (!n)
		return perr(ps, line, "'%s' needs at least one host name", policy_action_name(act));
	return 0;
}

static int parse_text(struct parse *ps, const char *text, size_t len)
{
	size_t pos = 0;
	unsigned line = 0;
	char *buf;
	int err = 0;
	const char *nul = len ? memchr(text, '\0', len) : NULL;

	if (nul) {
		for (const char *c = text; c < nul; c++)
			line += *c == '\n';
		return perr(ps, line + 1, "a NUL byte: this is not a text file");
	}
	buf = malloc(len + 1);
	if (!buf)
		return -ENOMEM;
	while (pos < len && !err) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
		char *hash;
		memcpy(buf, text + pos, n);
		buf[n] = '\0';
		if ((hash = strchr(buf, '#')))
			*hash = '\0';
		err = parse_line(ps, ++line, buf);
		pos += n + 1;
	}
	free(buf);
	return err;
}

static int intern_origin(struct policy *p, const char *origin, uint32_t *idx)
{
	char **no;

	for (size_t i = 0; i < p->norigins; i++) {
		if (!strcmp(p->origins[i], origin)) {
			*idx = (uint32_t)i;
			return 0;
		}
	}
	no = realloc(p->origins, (p->norigins + 1) * sizeof(*no));
	if (!no)
		return -ENOMEM;
	p->origins = no;
	if (!(no[p->norigins] = strdup(origin)))
		return -ENOMEM;
	*idx = (uint32_t)p->norigins++;
	return 0;
}

/* ---- the pattern index ---- */

static size_t hash_pattern(bool wildcard, const char *name)
{
	uint64_t h = wildcard ? 0x9e3779b97f4a7c15ull : 1469598103934665603ull;

	for (; *name; name++)
		h = (h ^ (uint8_t)*name) * 1099511628211ull;
	return (size_t)h;
}

/* The slot of pattern (wildcard, name) in index: its chain or an empty slot. */
static size_t find_slot(const struct rule *rules, const int32_t *index, size_t icap, bool wildcard,
			const char *name)
{
	size_t mask = icap - 1, i = hash_pattern(wildcard, name) & mask;

	while (index[i] >= 0 &&
	       (rules[index[i]].wildcard != wildcard || strcmp(rules[index[i]].name, name)))
		i = (i + 1) & mask;
	return i;
}

/* Fills a fresh index (icap slots) with every rule p holds. */
static void fill_index(struct policy *p, int32_t *index, size_t icap)
{
	for (size_t i = 0; i < icap; i++)
		index[i] = -1;
	for (size_t i = 0; i < p->nrules; i++) {
		struct rule *r = &p->rules[i];
		size_t slot = find_slot(p->rules, index, icap, r->wildcard, r->name);
		r->next = index[slot];
		index[slot] = (int32_t)i;
	}
	free(p->index);
	p->index = index;
	p->icap = icap;
}

static int32_t chain_of(const struct policy *p, bool wildcard, const char *name)
{
	return p->icap ? p->index[find_slot(p->rules, p->index, p->icap, wildcard, name)] : -1;
}

/* Walks the rules that match a name: those for the name itself, then
 * those for "*.S" for each suffix S the name is strictly below. */
struct match_iter {
	const struct policy *p;
	const char *key;
	int32_t i;
};

static void match_begin(struct match_iter *it, const struct policy *p, const char *name)
{
	it->p = p;
	it->key = name;
	it->i = chain_of(p, false, name);
}

static long match_next(struct match_iter *it)
{
	long cur;

	while (it->i < 0) {
		const char *dot = strchr(it->key, '.');
		if (!dot)
			return -1;
		it->key = dot + 1;
		it->i = chain_of(it->p, true, it->key);
	}
	cur = it->i;
	it->i = it->p->rules[cur].next;
	return cur;
}

/* Adds what ps parsed to p, all or nothing. */
static int commit(struct policy *p, struct parse *ps)
{
	size_t icap = 16;
	int32_t *index;
	uint32_t oi;
	int err;

	while (icap < 2 * (p->nrules + ps->n))
		icap *= 2;
	if (!(index = malloc(icap * sizeof(*index))))
		return -ENOMEM;

	if (p->nrules + ps->n > p->cap) {
		size_t cap = p->nrules + ps->n;
		struct rule *nr = realloc(p->rules, cap * sizeof(*nr));
		if (!nr) {
			free(index);
			return -ENOMEM;
		}
		p->rules = nr;
		p->cap = cap;
	}
	if ((err = intern_origin(p, ps->origin, &oi))) {
		free(index);
		return err;
	}
	for (size_t i = 0; i < ps->n; i++) {
		ps->rules[i].origin = oi;
		p->rules[p->nrules++] = ps->rules[i];
	}
	fill_index(p, index, icap);
	if (ps->has_default) {
		p->dflt = ps->dflt;
		p->dflt_origin = (int)oi;
		p->dflt_line = ps->dflt_line;
	}
	return 0;
}

static int add_parsed(struct policy *p, struct parse *ps, const char *text, size_t len)
{
	int err;

	pthread_rwlock_wrlock(&p->lock);
	ps->base = p->nrules;
	err = parse_text(ps, text, len);
	if (!err)
		err = commit(p, ps);
	pthread_rwlock_unlock(&p->lock);
	free(ps->rules);
	return err;
}

int policy_add_text(struct policy *p, const char *text, size_t len, const char *origin,
		    struct policy_error *err)
{
	struct parse ps = {.err = err, .origin = origin ? origin : "policy"};

	if (err)
		memset(err, 0, sizeof(*err));
	return add_parsed(p, &ps, text, len);
}

int policy_add_file(struct policy *p, const char *path, struct policy_error *err)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc = read_file(path, POLICY_FILE_MAX, &buf, &len);

	if (err)
		memset(err, 0, sizeof(*err));
	if (rc) {
		if (err) {
			snprintf(err->file, sizeof(err->file), "%s", path);
			snprintf(err->reason, sizeof(err->reason), "cannot read it: %s%s", strerror(-rc),
				 rc == -EFBIG ? " (over 1 MiB)" : "");
		}
		return rc;
	}
	rc = policy_add_text(p, (const char *)buf, len, path, err);
	free(buf);
	return rc;
}

int policy_add_allow(struct policy *p, const char *spec, struct policy_error *err)
{
	struct parse ps = {.err = err, .origin = "--allow"};
	char line[POLICY_NAME_MAX + 16];

	if (err)
		memset(err, 0, sizeof(*err));
	/* One pattern only: "allow a b" or a comment must not sneak in. */
	if (!*spec || strlen(spec) >= sizeof(line) - 7 || strpbrk(spec, " \t\r\n#"))
		return perr(&ps, 0, "'%.60s' is not HOST, *.SUFFIX or HOST:PORT", spec);
	snprintf(line, sizeof(line), "allow %s", spec);
	return add_parsed(p, &ps, line, strlen(line));
}

int policy_load_effective(const char *state_dir, struct policy **out, struct policy_error *err)
{
	char dir[4096], path[4200];
	struct policy *p = NULL;
	int rc;

	if ((rc = policy_new(&p)))
		return rc;
	if (kosa8_config_dir(dir, sizeof(dir)) == 0) {
		snprintf(path, sizeof(path), "%s/policy", dir);
		if ((rc = policy_add_file(p, path, err)) && rc != -ENOENT)
			goto fail;
	}
	if (state_dir) {
		snprintf(path, sizeof(path), "%s/policy", state_dir);
		if ((rc = policy_add_file(p, path, err)) && rc != -ENOENT)
			goto fail;
	}
	if (err)
		memset(err, 0, sizeof(*err));
	*out = p;
	return 0;
fail:
	policy_free(p);
	return rc;
}

/* ---- deciding ---- */

/* Is a more specific than b?  An exact name beats any wildcard, a longer
 * suffix a shorter one, a rule with a port one without; between equals the
 * later rule wins (a sandbox's file over the user's, an approval over both). */
static bool more_specific(const struct rule *a, size_t ai, const struct rule *b, size_t bi)
{
	if (a->wildcard != b->wildcard)
		return !a->wildcard;
	if (a->labels != b->labels)
		return a->labels > b->labels;
	if ((a->port != 0) != (b->port != 0))
		return a->port != 0;
	return ai > bi;
}

/* A rule without a port lets through the web ports only: a bare name must
 * not open SMTP or SSH at the same address.  A deny without a port closes
 * every port (the safe reading for a deny). */
static bool rule_covers(const struct rule *r, uint16_t port)
{
	if (r->port)
		return r->port == port;
	return r->action == POLICY_DENY || port == 443 || port == 80;
}

/* The decision for one concrete port (0: a port no rule names).  *which is
 * the deciding rule's index or -1 for the default. */
static enum policy_action decide_port(const struct policy *p, const char *name, uint16_t port,
				      long *which)
{
	struct match_iter it;
	long best = -1, deny = -1, i;

	match_begin(&it, p, name);
	while ((i = match_next(&it)) >= 0) {
		const struct rule *r = &p->rules[i];
		if (!rule_covers(r, port))
			continue;
		/* A deny is never overridden; the first in the files is named. */
		if (r->action == POLICY_DENY)
			deny = deny < 0 || i < deny ? i : deny;
		else if (best < 0 || more_specific(r, (size_t)i, &p->rules[best], (size_t)best))
			best = i;
	}
	*which = deny >= 0 ? deny : best;
	return deny >= 0 ? POLICY_DENY : best < 0 ? p->dflt : p->rules[best].action;
}

static int permissiveness(enum policy_action a)
{
	return a == POLICY_ALLOW ? 2 : a == POLICY_ASK ? 1 : 0;
}

/* Port 0 asks "may this name be reached at all": the most permissive
 * decision over every port, i.e. over the ports matching rules name and
 * one port that none names. */
static enum policy_action decide_any_port(const struct policy *p, const char *name, long *which)
{
	enum policy_action best = decide_port(p, name, 0, which);
	struct match_iter it;
	long i;

	/* A deny without a port closes every port. */
	if (best == POLICY_DENY && *which >= 0 && !p->rules[*which].port)
		return best;
	match_begin(&it, p, name);
	while (best != POLICY_ALLOW && (i = match_next(&it)) >= 0) {
		const struct rule *r = &p->rules[i];
		static const uint16_t web[] = {443, 80};
		/* Only a port a rule more permissive than what we have lets
		 * through can do better (a port named only by denies is
		 * denied); a rule without a port names the web ports. */
		if (r->action == POLICY_DENY || permissiveness(r->action) <= permissiveness(best))
			continue;
		for (size_t k = 0; k < (r->port ? 1 : 2); k++) {
			long w;
			enum policy_action a = decide_port(p, name, r->port ? r->port : web[k], &w);
			if (permissiveness(a) > permissiveness(best)) {
				best = a;
				*which = w;
			}
		}
	}
	return best;
}

static void describe_rule(const struct policy *p, const struct rule *r, char *buf, size_t len)
{
	char port[8] = "";

	if (r->port)
		snprintf(port, sizeof(port), ":%u", r->port);
	snprintf(buf, len, "%s %s%s%s (%s:%u)", policy_action_name(r->action), r->wildcard ? "*." : "",
		 r->name, port, p->origins[r->origin], r->line);
}

static void describe_default(const struct policy *p, char *buf, size_t len)
{
	if (p->dflt_origin < 0)
		snprintf(buf, len, "default %s", policy_action_name(p->dflt));
	else
		snprintf(buf, len, "default %s (%s:%u)", policy_action_name(p->dflt),
			 p->origins[p->dflt_origin], p->dflt_line);
}

enum policy_action policy_decide(const struct policy *p, const char *name, uint16_t port,
				 char *rule, size_t rulelen)
{
	char norm[POLICY_NAME_MAX + 1];
	struct policy *mp = (struct policy *)p; /* the lock, not the rules, changes */
	enum policy_action a;
	long which;

	if (!name || normalise(name, norm, sizeof(norm))) {
		if (rule && rulelen)
			snprintf(rule, rulelen, "not a host name");
		return POLICY_DENY;
	}
	pthread_rwlock_rdlock(&mp->lock);
	a = port ? decide_port(p, norm, port, &which) : decide_any_port(p, norm, &which);
	if (rule && rulelen) {
		if (which >= 0)
			describe_rule(p, &p->rules[which], rule, rulelen);
		else
			describe_default(p, rule, rulelen);
	}
	pthread_rwlock_unlock(&mp->lock);
	return a;
}

/* ---- showing ---- */

struct strbuf {
	char *s;
	size_t len, cap;
	int err;
};

__attribute__((format(printf, 2, 3)))
static void sb_printf(struct strbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->err)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->err = -EINVAL;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap * 2 + (size_t)n + 1;
		char *ns = realloc(b->s, cap);
		if (!ns) {
			b->err = -ENOMEM;
			return;
		}
		b->s = ns;
		b->cap = cap;
	}
}

int policy_format(const struct policy *p, char **out)
{
	struct policy *mp = (struct policy *)p;
	struct strbuf b = {.cap = 256};
	char port[8];

	if (!(b.s = malloc(b.cap)))
		return -ENOMEM;
	b.s[0] = '\0';
	pthread_rwlock_rdlock(&mp->lock);
	if (p->dflt_origin < 0)
		sb_printf(&b, "default %s\t# built in\n", policy_action_name(p->dflt));
	else
		sb_printf(&b, "default %s\t# %s:%u\n", policy_action_name(p->dflt),
			  p->origins[p->dflt_origin], p->dflt_line);
	for (size_t i = 0; i < p->nrules; i++) {
		const struct rule *r = &p->rules[i];
		port[0] = '\0';
		if (r->port)
			snprintf(port, sizeof(port), ":%u", r->port);
		sb_printf(&b, "%s %s%s%s\t# %s%s:%u\n", policy_action_name(r->action),
			  r->wildcard ? "*." : "", r->name, port,
			  r->port ? "" : r->action == POLICY_DENY ? "every port, " : "ports 443 and 80, ",
			  p->origins[r->origin], r->line);
	}
	pthread_rwlock_unlock(&mp->lock);
	if (b.err) {
		free(b.s);
		return b.err;
	}
	*out = b.s;
	return 0;
}
