/* Templates on the CLI's side (supervisor/template.h): finding or making the
 * one a new sandbox restores, `kosa8 image warm` and `kosa8 image prune`. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/util.h"
#include "disk/disk.h"
#include "sandbox/lookup.h"
#include "sandbox/owner.h"
#include "sandbox/sandbox.h"
#include "supervisor/template.h"
#include "supervisor/ckpt_ops.h"
#include "supervisor/supervisor.h"

/* Making one boots a guest: the supervisor's own bound, and a minute. */
#define MAKE_TIMEOUT_MS (supervisor_boot_timeout_ms() + 60 * 1000)
#define PROGRESS_EVERY_MS 10000

static int self_exe(char *buf)
{
	return realpath("/proc/self/exe", buf) ? 0 : -errno;
}

/* The template's sandbox.json and first delta: the sandbox's inputs, a
 * CID of its own while it boots. */
static int lay_out(const char *dir, const char *key, const struct sandbox_cfg *from, char *why,
		   size_t wlen)
{
	char disk[PATH_MAX + 200], derr[DISK_ERR_LEN];
	struct sandbox_cfg cfg;
	int lk, rc;

	memset(&cfg, 0, sizeof(cfg));
	template_name(key, cfg.name);
	snprintf(cfg.kernel, sizeof(cfg.kernel), "%s", from->kernel);
	snprintf(cfg.image, sizeof(cfg.image), "%s", from->image);
	cfg.mem = from->mem;
	cfg.cpus = from->cpus;
	cfg.created = (int64_t)time(NULL);
	if (mkdir(dir, 0700) < 0)
		return snprintf(why, wlen, "cannot create %s: %s", dir, strerror(errno)), -errno;
	if ((lk = sandbox_create_lock()) < 0)
		return snprintf(why, wlen, "cannot lock the sandboxes' directory"), lk;
	/* The CID is this template's once its sandbox.json is written, under
	 * the same lock that creates and forks pick theirs. */
	cfg.cid = sandbox_cid_pick();
	if (!cfg.cid) {
		close(lk);
		return snprintf(why, wlen, "no vsock CID left"), -ENOSPC;
	}
	if ((rc = sandbox_cfg_save(dir, &cfg)))
		snprintf(why, wlen, "cannot write the template's sandbox.json: %s", strerror(-rc));
	close(lk);
	if (rc)
		return rc;
	snprintf(disk, sizeof(disk), "%s/disk.k8d", dir);
	if ((rc = disk_create(disk, cfg.image, NULL, derr, sizeof(derr))))
		return snprintf(why, wlen, "the template's disk: %s", derr), rc;
	return 0;
}

static double since(uint64_t t0)
{
	return (double)(mono_ms() - t0) / 1000.0;
}

/* Runs the template's supervisor (supervisor_make_template) and shows its
 * progress on stderr until it says ok or fails (its reason in why). */
static int boot_and_checkpoint(const char *cmd, const char *dir, char *why, size_t wlen)
{
	char self[PATH_MAX], line[512], fdstr[16], log[PATH_MAX + 200];
	uint64_t t0 = mono_ms(), last = t0, deadline = t0 + (uint64_t)MAKE_TIMEOUT_MS;
	const char *phase = "booting the guest";
	size_t n = 0;
	int p[2], rc = -EIO;
	pid_t pid;

	if (self_exe(self) || pipe2(p, O_CLOEXEC) < 0)
		return snprintf(why, wlen, "%s", strerror(errno)), -errno;
	snprintf(log, sizeof(log), "%s/" SUPERVISOR_LOG_FILE, dir);
	if ((pid = fork()) < 0)
		return snprintf(why, wlen, "%s", strerror(errno)), -errno;
	if (pid == 0) {
		cli_child_stdio_to_log(dir);
		fcntl(p[1], F_SETFD, 0);
		snprintf(fdstr, sizeof(fdstr), "%d", p[1]);
		execl(self, self, "__template", dir, fdstr, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	fprintf(stderr, "kosa8 %s: %s...\n", cmd, phase);
	line[0] = 0;
	while (mono_ms() < deadline) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		int r = poll(&pf, 1, 1000);
		if (r < 0 && errno == EINTR)
			continue;
		if (mono_ms() - last >= PROGRESS_EVERY_MS) {
			last = mono_ms();
			fprintf(stderr, "kosa8 %s: %s... %.0f s\n", cmd, phase, since(t0));
		}
		if (r <= 0)
			continue;
		if (read(p[0], line + n, 1) != 1)
			break;
		if (line[n] != '\n' && n + 2 < sizeof(line)) {
			n++;
			continue;
		}
		line[n] = 0;
		n = 0;
		if (!strncmp(line, "warning: ", 9)) {
			(void)cli_fail(cmd, "%s", line); /* the message says warning */
			continue;
		}
		if (!strcmp(line, "progress checkpoint")) {
			phase = "checkpointing the booted guest";
			fprintf(stderr, "kosa8 %s: the guest is ready after %.1f s; %s...\n", cmd, since(t0),
				phase);
			continue;
		}
		rc = strcmp(line, "ok") ? -EIO : 0;
		break;
	}
	close(p[0]);
	if (rc && mono_ms() >= deadline) {
		kill(pid, SIGKILL);
		snprintf(why, wlen, "no template within %d s (see %.3500s)", MAKE_TIMEOUT_MS / 1000, log);
	} else if (rc) {
		const char *l = strncmp(line, "error: ", 7) ? line : line + 7;
		snprintf(why, wlen, "%.400s (see %.3500s)", l[0] ? l : "the template's supervisor died", log);
	}
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	if (!rc)
		fprintf(stderr, "kosa8 %s: template made in %.1f s\n", cmd, since(t0));
	return rc;
}

static int make(const char *cmd, const char *root, const char *key, const struct sandbox_cfg *cfg,
		const struct template_inputs *in, char *why, size_t wlen)
{
	char dir[PATH_MAX + TEMPLATE_KEY_LEN + 2];
	int rc;

	snprintf(dir, sizeof(dir), "%s/%s", root, key);
	fprintf(stderr, "kosa8 %s: making the template for %s, %d vCPU%s, %llu MiB (once; "
		"'kosa8 image warm' makes it ahead of time)\n", cmd, cfg->image, cfg->cpus,
		cfg->cpus == 1 ? "" : "s", (unsigned long long)(cfg->mem / MiB));
	/* Whatever a failed maker left: never used, removed under the lock. */
	cli_remove_tree(dir);
	if (!(rc = lay_out(dir, key, cfg, why, wlen)) && !(rc = boot_and_checkpoint(cmd, dir, why, wlen)))
		rc = template_seal(root, key, in, why, wlen);
	if (rc)
		cli_remove_tree(dir);
	return rc;
}

/* template_key, remembered while the kernel, image, kosa8 and its VMM stay
 * as they were (sandbox/lookup.h): hashing them (some 10 MB) is most of
 * what a create from a template costs in the CLI. */
static int cached_key(const struct template_inputs *in, char key[TEMPLATE_KEY_LEN + 1], char *why,
		      size_t wlen)
{
	char vmm[PATH_MAX], cache[PATH_MAX], q[3 * PATH_MAX + 64];
	struct lookup_deps d = {.files = {in->kernel, in->image, in->exe, vmm}, .nfiles = 4};
	int n = snprintf(q, sizeof(q), "template key\n%s\n%s\n%s\n%d\n%llu", in->kernel, in->image,
			 in->exe, in->cpus, (unsigned long long)in->mem);
	bool cached = n > 0 && (size_t)n < sizeof(q) && !kosa8_vmm_path(in->exe, vmm, sizeof(vmm)) &&
		      !lookup_path(q, (size_t)n, cache, sizeof(cache));
	int rc;

	if (cached && lookup_load(cache, key, TEMPLATE_KEY_LEN + 1) == 0 && template_key_valid(key))
		return 0;
	if (!(rc = template_key(in, key, why, wlen)) && cached)
		lookup_store(cache, &d, key);
	return rc;
}

int cli_template_ensure(const char *cmd, const struct sandbox_cfg *cfg, struct cli_template *t)
{
	char self[PATH_MAX], why[PATH_MAX + 256];
	struct template_inputs in = {.kernel = cfg->kernel, .image = cfg->image, .exe = self,
				     .mem = cfg->mem, .cpus = cfg->cpus};
	bool waited;
	int rc;

	t->lock = -1;
	if (self_exe(self))
		return cli_fail(cmd, "cannot find the kosa8 binary: %s", strerror(errno));
	if ((rc = template_root(t->root, sizeof(t->root), true, why, sizeof(why))))
		return cli_fail(cmd, "templates: %s", why);
	if ((rc = cached_key(&in, t->key, why, sizeof(why))))
		return cli_fail(cmd, "template key: %s", why);
	template_name(t->key, t->name);
	snprintf(t->dir, sizeof(t->dir), "%s/%s", t->root, t->key);
	/* Held until the new sandbox's pin is written: prune waits. */
	if ((t->lock = template_lock(t->root, t->key, &waited)) < 0)
		return cli_fail(cmd, "cannot lock template %s: %s", t->name, strerror(-t->lock));
	if (waited)
		fprintf(stderr, "kosa8 %s: waited for another kosa8 that made template %s\n", cmd, t->name);
	rc = template_check(t->root, t->key, why, sizeof(why));
	if (rc == -ENOENT)
		rc = make(cmd, t->root, t->key, cfg, &in, why, sizeof(why));
	if (rc) {
		close(t->lock);
		t->lock = -1;
		return cli_fail(cmd, "template %s: %s", t->name, why);
	}
	return 0;
}

/* ---- prune ---- */

/* Whether template KEY's inputs are as they were: 0, or why not. */
static int stale(const char *root, const char *key, char *why, size_t wlen)
{
	char kernel[PATH_MAX], image[PATH_MAX], self[PATH_MAX], now[TEMPLATE_KEY_LEN + 1];
	struct template_inputs in = {.kernel = kernel, .image = image, .exe = self};
	int rc = template_load(root, key, kernel, image, &in.mem, &in.cpus);

	if (rc)
		return snprintf(why, wlen, rc == -ENOENT ? "half-made" : "damaged"), 1;
	if (self_exe(self))
		return 0;
	if (template_key(&in, now, why, wlen))
		return 1; /* why: the input that is gone */
	if (strcmp(now, key))
		return snprintf(why, wlen, "its kernel, image or kosa8 changed"), 1;
	return 0;
}

static void prune_one(const char *root, const char *key, bool all, int *removed)
{
	char dir[PATH_MAX + 258], why[PATH_MAX + 128] = "", child[PATH_MAX], path[PATH_MAX + 264];
	int lk;

	snprintf(dir, sizeof(dir), "%s/%s", root, key);
	/* A template being made or used right now is left alone. */
	snprintf(path, sizeof(path), "%s/%s.lock", root, key);
	if ((lk = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0 ||
	    flock(lk, LOCK_EX | LOCK_NB) < 0) {
		if (lk >= 0)
			close(lk);
		printf("kept    %.12s: being made or used now\n", key);
		return;
	}
	if (!all && !stale(root, key, why, sizeof(why))) {
		close(lk);
		return;
	}
	if (all)
		snprintf(why, sizeof(why), "--all");
	if (ckpt_live_fork(dir, TEMPLATE_CKPT, child, sizeof(child))) {
		printf("kept    %.12s (%s): sandbox '%s' stands on it\n", key, why, child);
		close(lk);
		return;
	}
	if (cli_remove_tree(dir)) {
		printf("failed  %.12s: cannot remove %s\n", key, dir);
	} else {
		printf("removed %.12s: %s\n", key, why);
		(*removed)++;
	}
	close(lk);
}

int cli_template_prune(bool all)
{
	char root[PATH_MAX], why[PATH_MAX + 128];
	struct dirent *e;
	int removed = 0;
	DIR *d;

	if (template_root(root, sizeof(root), false, why, sizeof(why))) {
		if (errno == ENOENT || access(root, F_OK) < 0) {
			printf("no templates\n");
			return 0;
		}
		return cli_fail("image prune", "%s", why);
	}
	if (!(d = opendir(root)))
		return cli_fail("image prune", "%s: %s", root, strerror(errno));
	while ((e = readdir(d)))
		if (template_key_valid(e->d_name))
			prune_one(root, e->d_name, all, &removed);
	closedir(d);
	printf("%d template%s removed\n", removed, removed == 1 ? "" : "s");
	return 0;
}

/* Hidden: a template's supervisor (started by cli_template_ensure). */
int cmd_template(int argc, char **argv)
{
	char self[PATH_MAX];

	if (argc != 3 || self_exe(self))
		return 2;
	return supervisor_make_template(self, argv[1], atoi(argv[2])) ? 1 : 0;
}
