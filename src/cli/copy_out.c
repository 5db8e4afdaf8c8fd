/* How files that come out of a guest (kosa8 cp, diff, export) are written
 * on the host: through the guarded writer (common/guarded.h), with modes
 * stripped of setuid, setgid and sticky bits and under the umask, owned by
 * the user who asked (under sudo, SUDO_UID:SUDO_GID, never root), and
 * within a bound a guest cannot talk its way past. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/util.h"

#define COPY_OUT_MAX_DEFAULT (4 * GiB)
#define COPY_OUT_FILES_DEFAULT 1000000ULL

static int env_bound(const char *cmd, const char *name, bool size, uint64_t dflt, uint64_t *out)
{
	const char *v = getenv(name);
	char *end;

	*out = dflt;
	if (!v || !*v)
		return 0;
	if (size ? parse_size(v, out) : (errno = 0, *out = strtoull(v, &end, 10), errno || *end))
		return cli_fail(cmd, "%s=%s is not a %s", name, v, size ? "size (e.g. 512M, 8G)" : "count");
	if (!*out)
		return cli_fail(cmd, "%s must be above 0", name);
	return 0;
}

/* Under sudo the files go to the user who ran sudo, not to root. */
static int sudo_owner(const char *cmd, struct gw_opts *o)
{
	const char *u = getenv("SUDO_UID"), *g = getenv("SUDO_GID");
	char *e1 = NULL, *e2 = NULL;

	if (geteuid() != 0 || !u || !*u)
		return 0;
	errno = 0;
	unsigned long uid = strtoul(u, &e1, 10), gid = g && *g ? strtoul(g, &e2, 10) : uid;
	if (errno || *e1 || (e2 && *e2) || uid >= (uid_t)-1 || gid >= (gid_t)-1)
		return cli_fail(cmd, "SUDO_UID=%s / SUDO_GID=%s are not user and group ids", u, g ? g : "");
	o->chown = true;
	o->uid = (uid_t)uid;
	o->gid = (gid_t)gid;
	return 0;
}

int cli_copy_out_opts(const char *cmd, struct gw_opts *o)
{
	/* mode_mask 0: the writer's default, 0777 under the umask. */
	memset(o, 0, sizeof(*o));
	if (env_bound(cmd, "KOSA8_COPY_OUT_MAX", true, COPY_OUT_MAX_DEFAULT, &o->max_bytes) ||
	    env_bound(cmd, "KOSA8_COPY_OUT_FILES", false, COPY_OUT_FILES_DEFAULT, &o->max_entries))
		return 1;
	return sudo_owner(cmd, o);
}

void cli_copy_out_report(const char *cmd, int err, const struct ap_tree_stats *st)
{
	if (st->special_dropped)
		fprintf(stderr, "kosa8 %s: setuid, setgid and sticky bits dropped from %u file%s "
				"(a guest's modes are not trusted on the host)\n", cmd, st->special_dropped,
			st->special_dropped == 1 ? "" : "s");
	if (err == -EDQUOT)
		fprintf(stderr, "kosa8 %s: the bound is KOSA8_COPY_OUT_MAX (bytes, default 4G) and "
				"KOSA8_COPY_OUT_FILES (entries, default 1000000)\n", cmd);
}
