/* Egress policy: which host names (and ports) a sandbox may reach.
 *
 * A policy is the user's defaults (<config>/policy) with the sandbox's own
 * file and `kosa8 run --allow HOST` rules over them.  Names are compared
 * label by label after normalisation (lower case, no trailing dot, IDNA
 * A-labels only, each label 1-63 of [a-z0-9-] not starting or ending with
 * '-', total <= 253): never as substrings or regular expressions over the
 * raw name.  A matching deny rule always wins; otherwise the most specific
 * matching allow or ask rule decides (an exact name over any "*.suffix", a
 * longer suffix over a shorter, a rule with a port over one without, and
 * between equals the later rule, so an "allow always" approval overrides an
 * `ask`); a name no rule matches gets the default (deny unless the file says
 * "default ask").  The file format is in docs/policy.md. */
#ifndef KOSA8_PROXY_POLICY_H
#define KOSA8_PROXY_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POLICY_NAME_MAX 253

enum policy_action { POLICY_DENY = 0, POLICY_ALLOW = 1, POLICY_ASK = 2 };

struct policy;

/* What a parse error says: where and why ("policy:12: '*.' is not a host name"). */
struct policy_error {
	char file[256];
	unsigned line;     /* 1-based; 0 when not about one line */
	char reason[160];
};

/* An empty policy (default deny, no rules).  -ENOMEM. */
int policy_new(struct policy **out);
void policy_free(struct policy *p);

/* Adds the rules of one file's text on top of what p holds (a later file's
 * "default" replaces an earlier one).  origin names the file in errors.
 * -EINVAL with *err filled for any error; p is unchanged then. */
int policy_add_text(struct policy *p, const char *text, size_t len, const char *origin,
		    struct policy_error *err);
/* Same, from a file; a missing file is -ENOENT (callers decide if optional). */
int policy_add_file(struct policy *p, const char *path, struct policy_error *err);
/* A sandbox's effective policy: the user's defaults <config>/policy
 * (kosa8_config_dir), then <state_dir>/policy when state_dir is not NULL.
 * Either file may be missing; one that does not parse fails with *err. */
int policy_load_effective(const char *state_dir, struct policy **out, struct policy_error *err);
/* One rule as `kosa8 run --allow` gives it: "HOST", "*.SUFFIX", "HOST:PORT". */
int policy_add_allow(struct policy *p, const char *spec, struct policy_error *err);

/* Normalises a host name into out (POLICY_NAME_MAX + 1 bytes).  -EINVAL if it
 * is not a host name (an IP literal is not one: -EINVAL too). */
int policy_normalise_name(const char *in, char *out, size_t outlen);
/* A port as a rule writes it after the colon: 1-65535 in at most five
 * decimal digits, nothing else.  -EINVAL. */
int policy_parse_port(const char *s, uint16_t *port);

/* The decision for name:port (port 0: "any port", as DNS asks).  A rule
 * without a port covers 443 and 80 (allow, ask) or every port (deny).  name need
 * not be normalised; one that is not a valid host name is denied.  If rule
 * is not NULL it gets a short description of the deciding rule
 * ("allow *.github.com:443 (policy:3)" or "default deny"). */
enum policy_action policy_decide(const struct policy *p, const char *name, uint16_t port,
				 char *rule, size_t rulelen);

/* The policy as text in the file format, defaults first (for `policy show`). */
int policy_format(const struct policy *p, char **out);

const char *policy_action_name(enum policy_action a);

#endif
