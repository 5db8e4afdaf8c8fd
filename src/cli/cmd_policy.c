/* kosa8 policy: shows a sandbox's effective egress policy and asks it about
 * one host, from the same files and code the supervisor uses
 * (policy_load_effective), so what it says is what the sandbox gets.
 *
 *   kosa8 policy show [--sandbox NAME]
 *   kosa8 policy check HOST[:PORT] [--sandbox NAME]
 *       exit 0 allow, 1 deny, 3 ask; 2 for a usage error or a bad file */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "proxy/policy.h"
#include "sandbox/sandbox.h"

#define EXIT_ASK 3

/* The sandbox's state directory into dir, or "" without --sandbox. */
static int sandbox_dir(const char *name, char *dir, size_t len)
{
	struct sandbox_cfg cfg;
	int err;

	dir[0] = '\0';
	if (!name)
		return 0;
	if (!sandbox_name_valid(name)) {
		fprintf(stderr, "kosa8 policy: '%s' is not a sandbox name\n", name);
		return 2;
	}
	if ((err = sandbox_state_dir(name, dir, len)) || (err = sandbox_cfg_load(dir, &cfg))) {
		fprintf(stderr, "kosa8 policy: no sandbox '%s' (see 'kosa8 ps'): %s\n", name, strerror(-err));
		return 2;
	}
	return 0;
}

static int load(const char *dir, struct policy **p)
{
	struct policy_error e;
	int err = policy_load_effective(dir[0] ? dir : NULL, p, &e);

	if (!err)
		return 0;
	if (e.line)
		fprintf(stderr, "kosa8 policy: %s:%u: %s\n", e.file, e.line, e.reason);
	else if (e.file[0])
		fprintf(stderr, "kosa8 policy: %s: %s\n", e.file, e.reason);
	else
		fprintf(stderr, "kosa8 policy: cannot load the policy: %s\n", strerror(-err));
	return 2;
}

/* Which files make up the policy, as comments (a missing one is fine). */
static void show_sources(const char *dir)
{
	char cfg[PATH_MAX], path[PATH_MAX + 16];

	if (kosa8_config_dir(cfg, sizeof(cfg)) == 0) {
		snprintf(path, sizeof(path), "%s/policy", cfg);
		printf("# user defaults: %s%s\n", path, access(path, F_OK) ? " (none)" : "");
	}
	if (dir[0]) {
		snprintf(path, sizeof(path), "%s/policy", dir);
		printf("# sandbox:       %s%s\n", path, access(path, F_OK) ? " (none)" : "");
	}
}

static int show(const char *sandbox)
{
	char dir[PATH_MAX], *text = NULL;
	struct policy *p = NULL;
	int rc;

	if ((rc = sandbox_dir(sandbox, dir, sizeof(dir))) || (rc = load(dir, &p)))
		return rc;
	show_sources(dir);
	if ((rc = policy_format(p, &text))) {
		fprintf(stderr, "kosa8 policy: %s\n", strerror(-rc));
		policy_free(p);
		return 2;
	}
	fputs(text, stdout);
	free(text);
	policy_free(p);
	return 0;
}

/* "HOST" or "HOST:PORT" (port 0: any). */
static int split_host(const char *arg, char *host, size_t len, uint16_t *port)
{
	const char *colon = strrchr(arg, ':');
	char *end;
	long v;

	*port = 0;
	/* Two colons or brackets: an IPv6 literal, which policy_decide denies
	 * as not a host name; pass it through whole. */
	if (!colon || strchr(arg, ':') != colon || strchr(arg, '[')) {
		snprintf(host, len, "%s", arg);
		return 0;
	}
	errno = 0;
	v = strtol(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || v < 1 || v > 65535 || (size_t)(colon - arg) >= len)
		return -EINVAL;
	memcpy(host, arg, (size_t)(colon - arg));
	host[colon - arg] = '\0';
	*port = (uint16_t)v;
	return 0;
}

static int check(const char *arg, const char *sandbox)
{
	char dir[PATH_MAX], host[1024], rule[PATH_MAX + 512], port_s[8] = "";
	struct policy *p = NULL;
	enum policy_action a;
	uint16_t port;
	int rc;

	if (split_host(arg, host, sizeof(host), &port)) {
		fprintf(stderr, "kosa8 policy: '%s': the port must be 1-65535\n", arg);
		return 2;
	}
	if ((rc = sandbox_dir(sandbox, dir, sizeof(dir))) || (rc = load(dir, &p)))
		return rc;
	a = policy_decide(p, host, port, rule, sizeof(rule));
	policy_free(p);
	if (port)
		snprintf(port_s, sizeof(port_s), ":%u", port);
	printf("%s %s%s: %s\n", policy_action_name(a), host, port_s, rule);
	return a == POLICY_ALLOW ? 0 : a == POLICY_ASK ? EXIT_ASK : 1;
}

int cmd_policy(int argc, char **argv)
{
	const char *sandbox = NULL, *args[2] = {NULL, NULL};
	int n = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--sandbox") && i + 1 < argc)
			sandbox = argv[++i];
		else if (!strncmp(argv[i], "--sandbox=", 10))
			sandbox = argv[i] + 10;
		else if (argv[i][0] == '-' || n == 2)
			return cli_usage_error("policy", NULL);
		else
			args[n++] = argv[i];
	}
	if (n == 1 && !strcmp(args[0], "show"))
		return show(sandbox);
	if (n == 2 && !strcmp(args[0], "check"))
		return check(args[1], sandbox);
	return cli_usage_error("policy", NULL);
}
