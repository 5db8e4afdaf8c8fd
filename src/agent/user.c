/* User lookups from /etc/passwd and /etc/group.  A static glibc cannot load
 * NSS modules, and the guest image keeps its users in these files anyway. */
#include "agent.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Splits a line into at most n ':'-separated fields in place. */
static int split(char *line, char **f, int n)
{
	int i = 0;
	f[i++] = line;
	for (char *p = line; *p && i < n; p++) {
		if (*p == ':') {
			*p = 0;
			f[i++] = p + 1;
		}
	}
	return i;
}

static int parse_id(const char *s, unsigned long *v)
{
	char *end;
	if (!*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	*v = strtoul(s, &end, 10);
	if (errno || *end || *v > 0x7fffffffUL)
		return -EINVAL;
	return 0;
}

static void copy(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src);
}

static int find_passwd(const char *name, bool by_uid, unsigned long uid, struct agent_user *u)
{
	FILE *f = fopen("/etc/passwd", "re");
	char line[1024];
	int rc = -ENOENT;
	if (!f)
		return -ENOENT;
	while (rc && fgets(line, sizeof(line), f)) {
		char *fl[7];
		line[strcspn(line, "\n")] = 0;
		unsigned long id, gid;
		if (split(line, fl, 7) != 7 || parse_id(fl[2], &id) || parse_id(fl[3], &gid))
			continue;
		if (by_uid ? id != uid : strcmp(fl[0], name) != 0)
			continue;
		u->uid = (uid_t)id;
		u->gid = (gid_t)gid;
		copy(u->name, sizeof(u->name), fl[0]);
		copy(u->home, sizeof(u->home), fl[5][0] ? fl[5] : "/");
		copy(u->shell, sizeof(u->shell), fl[6][0] ? fl[6] : "/bin/sh");
		rc = 0;
	}
	fclose(f);
	return rc;
}

/* Supplementary groups: every /etc/group line listing the user by name. */
static void find_groups(struct agent_user *u)
{
	FILE *f = fopen("/etc/group", "re");
	char line[4096];
	u->groups[0] = u->gid;
	u->ngroups = 1;
	if (!f || !u->name[0]) {
		if (f)
			fclose(f);
		return;
	}
	while (fgets(line, sizeof(line), f) && u->ngroups < (int)(sizeof(u->groups) / sizeof(u->groups[0]))) {
		char *fl[4];
		unsigned long gid;
		line[strcspn(line, "\n")] = 0;
		if (split(line, fl, 4) != 4 || parse_id(fl[2], &gid) || gid == u->gid)
			continue;
		for (char *m = strtok(fl[3], ","); m; m = strtok(NULL, ","))
			if (!strcmp(m, u->name))
				u->groups[u->ngroups++] = (gid_t)gid;
	}
	fclose(f);
}

int user_lookup(const char *spec, struct agent_user *u, char *err, size_t errsz)
{
	unsigned long id;
	memset(u, 0, sizeof(*u));
	if (!spec || !*spec)
		spec = agent_cfg.default_user;
	bool numeric = parse_id(spec, &id) == 0;
	int rc = find_passwd(spec, numeric, numeric ? id : 0, u);
	if (rc && numeric) {
		/* An explicit uid need not exist, as with docker --user. */
		u->uid = (uid_t)id;
		u->gid = (gid_t)id;
		copy(u->home, sizeof(u->home), "/");
		copy(u->shell, sizeof(u->shell), "/bin/sh");
		rc = 0;
	}
	if (rc) {
		snprintf(err, errsz, "user '%s' does not exist in the guest (/etc/passwd)", spec);
		return -ENOENT;
	}
	find_groups(u);
	return 0;
}
