#include "supervisor/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define PROC_TEXT_MAX (1u << 20)

/* A /proc text file into a NUL-terminated malloc'd buffer (st_size is 0
 * there, so read until the end, up to PROC_TEXT_MAX). */
static int read_proc_text(const char *path, char **out)
{
	size_t cap = 16384, used = 0;
	char *buf = malloc(cap);
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (!buf || fd < 0) {
		int err = fd < 0 ? -errno : -ENOMEM;
		free(buf);
		if (fd >= 0)
			close(fd);
		return err;
	}
	for (;;) {
		ssize_t n;
		if (used + 1 == cap) {
			char *nb = cap < PROC_TEXT_MAX ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				free(buf);
				close(fd);
				return -EFBIG;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + used, cap - used - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		used += (size_t)n;
	}
	close(fd);
	buf[used] = 0;
	*out = buf;
	return 0;
}

/* mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER".
 * Mount points with spaces are escaped (\040): such a one is not used. */
int cgroup_find_mount(const char *mountinfo, char *out, size_t len)
{
	const char *line = mountinfo;

	while (line && *line) {
		const char *end = strchr(line, '\n'), *dash;
		size_t n = end ? (size_t)(end - line) : strlen(line);
		char l[1024], root[512], mnt[512];

		if (n < sizeof(l)) {
			memcpy(l, line, n);
			l[n] = 0;
			dash = strstr(l, " - ");
			if (dash && strncmp(dash + 3, "cgroup2 ", 8) == 0 &&
			    sscanf(l, "%*s %*s %*s %511s %511s", root, mnt) == 2 && strcmp(root, "/") == 0 &&
			    !strchr(mnt, '\\'))
				return snprintf(out, len, "%s", mnt) < (int)len ? 0 : -ENAMETOOLONG;
		}
		line = end ? end + 1 : NULL;
	}
	return -ENOENT;
}

/* /proc/self/cgroup: the v2 line is "0::/PATH". */
int cgroup_own_path(const char *text, char *out, size_t len)
{
	const char *p = text;

	while (p && *p) {
		const char *end = strchr(p, '\n');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n >= 4 && strncmp(p, "0::/", 4) == 0) {
			if (n - 3 >= len)
				return -ENAMETOOLONG;
			memcpy(out, p + 3, n - 3);
			out[n - 3] = 0;
			return 0;
		}
		p = end ? end + 1 : NULL;
	}
	return -ENOENT;
}

int cgroup_kosa8_parent(const char *own, unsigned uid, char *out, size_t len)
{
	char svc[48];
	const char *at;
	size_t n;

	if (uid == 0)
		return snprintf(out, len, "kosa8") < (int)len ? 0 : -ENAMETOOLONG;
	/* systemd delegates user@UID.service to the user; their own processes
	 * sit in leaves below it, so a new child there is theirs to limit. */
	snprintf(svc, sizeof(svc), "/user@%u.service", uid);
	at = strstr(own, svc);
	if (!at || (at[strlen(svc)] != '/' && at[strlen(svc)] != 0))
		return -EPERM;
	n = (size_t)(at - own) + strlen(svc);
	while (*own == '/' && n > 0) {
		own++;
		n--;
	}
	return snprintf(out, len, "%.*s/kosa8", (int)n, own) < (int)len ? 0 : -ENAMETOOLONG;
}

/* dir/file := text. */
static int write_knob(const char *dir, const char *file, const char *text)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	return write_text_file(path, text);
}

/* Enables a controller for dir's children.  The kernel refuses one dir
 * does not offer (ENOENT), so no need to read cgroup.controllers first. */
static bool enable_controller(const char *dir, const char *name)
{
	char plus[32];

	snprintf(plus, sizeof(plus), "+%s", name);
	return write_knob(dir, "cgroup.subtree_control", plus) == 0;
}

int vmm_cgroup_parent(char *dir, size_t len, char *why, size_t whylen)
{
	char *mi = NULL, *pc = NULL, mnt[512], own[PATH_MAX], rel[PATH_MAX];
	int err;

	if ((err = read_proc_text("/proc/self/mountinfo", &mi)) == 0)
		err = cgroup_find_mount(mi, mnt, sizeof(mnt));
	free(mi);
	if (err) {
		snprintf(why, whylen, "no cgroup v2 file system is mounted");
		return err;
	}
	if ((err = read_proc_text("/proc/self/cgroup", &pc)) == 0)
		err = cgroup_own_path(pc, own, sizeof(own));
	free(pc);
	if (!err)
		err = cgroup_kosa8_parent(own, (unsigned)getuid(), rel, sizeof(rel));
	if (err) {
		snprintf(why, whylen, "no cgroup delegated to uid %u (not root, no systemd user@%u.service)",
			 (unsigned)getuid(), (unsigned)getuid());
		return err;
	}
	return snprintf(dir, len, "%s/%s", mnt, rel) >= (int)len ? -ENAMETOOLONG : 0;
}

/* The directory that holds kosa8's per-sandbox cgroups, with the memory,
 * pids and cpu controllers enabled for its children as far as possible. */
static int kosa8_parent_dir(char *dir, size_t len, char *why, size_t whylen)
{
	char top[PATH_MAX];
	int err;

	if ((err = vmm_cgroup_parent(dir, len, why, whylen)))
		return err;
	/* kosa8's directory sits right below the mount (root) or below the
	 * delegated service: that one must hand the controllers down. */
	snprintf(top, sizeof(top), "%s", dir);
	*strrchr(top, '/') = 0;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		err = -errno;
		snprintf(why, whylen, "cannot create %s: %s", dir, strerror(errno));
		return err;
	}
	for (const char *const *c = (const char *const[]){"memory", "pids", "cpu", NULL}; *c; c++)
		if (enable_controller(top, *c))
			enable_controller(dir, *c);
	return 0;
}

/* Writes one limit if its controller is on; notes it in cg->limits or in
 * the list of missing ones. */
static void apply_limit(struct vmm_cgroup *cg, const char *file, const char *value, char *missing,
			size_t mlen)
{
	size_t used = strlen(cg->limits);

	if (write_knob(cg->path, file, value) == 0) {
		snprintf(cg->limits + used, sizeof(cg->limits) - used, "%s%s=%s", used ? " " : "", file,
			 value);
	} else if (missing) {
		used = strlen(missing);
		snprintf(missing + used, mlen - used, "%s%s", used ? ", " : "", file);
	}
}

int vmm_cgroup_create(struct vmm_cgroup *cg, const char *sandbox, const struct vmm_cgroup_limits *lim,
		      char *why, size_t whylen)
{
	char parent[PATH_MAX], v[64], missing[96] = "";
	int err;

	memset(cg, 0, sizeof(*cg));
	why[0] = 0;
	if ((err = kosa8_parent_dir(parent, sizeof(parent), why, whylen)))
		return err;
	if (snprintf(cg->path, sizeof(cg->path), "%s/%s", parent, sandbox) >= (int)sizeof(cg->path)) {
		cg->path[0] = 0;
		return -ENAMETOOLONG;
	}
	if (mkdir(cg->path, 0755) < 0 && errno != EEXIST) {
		err = -errno;
		snprintf(why, whylen, "cannot create %s: %s", cg->path, strerror(errno));
		cg->path[0] = 0;
		return err;
	}
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(lim->mem + VMM_CGROUP_MEM_SLACK));
	apply_limit(cg, "memory.max", v, missing, sizeof(missing));
	/* Swapped-out guest memory would still be the host's: none, where
	 * swap is accounted (no word where it is not: nothing to limit). */
	apply_limit(cg, "memory.swap.max", "0", NULL, 0);
	snprintf(v, sizeof(v), "%d", VMM_CGROUP_PIDS);
	apply_limit(cg, "pids.max", v, missing, sizeof(missing));
	snprintf(v, sizeof(v), "%d 100000", (lim->cpus + 1) * 100000);
	apply_limit(cg, "cpu.max", v, missing, sizeof(missing));
	if (missing[0])
		snprintf(why, whylen, "%s: no %s (controller not available there)", cg->path, missing);
	return 0;
}

int vmm_cgroup_allow_frozen(struct vmm_cgroup *cg, uint64_t guest_mem)
{
	char v[64];

	if (!cg->path[0] || !strstr(cg->limits, "memory.max="))
		return 0;
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(2 * guest_mem + VMM_CGROUP_MEM_SLACK));
	return write_knob(cg->path, "memory.max", v);
}

int vmm_cgroup_open(const struct vmm_cgroup *cg)
{
	int fd;

	if (!cg->path[0])
		return -ENOENT;
	fd = open(cg->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int vmm_cgroup_add(const struct vmm_cgroup *cg, pid_t pid)
{
	char v[24];

	if (!cg->path[0])
		return 0;
	snprintf(v, sizeof(v), "%d", (int)pid);
	return write_knob(cg->path, "cgroup.procs", v);
}

void vmm_cgroup_remove(struct vmm_cgroup *cg)
{
	if (cg->path[0] && rmdir(cg->path) == 0)
		cg->path[0] = 0;
}
