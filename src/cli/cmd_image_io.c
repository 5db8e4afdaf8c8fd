/* kosa8 image export / import: an image to one archive file and back, from
 * a path or a URL (src/image/import.h does the work), with progress on a
 * terminal; and the default
 * image imported on first use from $KOSA8_IMAGE_SOURCE (docs/images.md).
 * Linked into kosa8-tools only (tools.c). */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "image/import.h"

/* The answer and what it depends on, from SCRIPT --path --inputs's output
 * (lines "file PATH", "env NAME", then the path); pointers into out. */

struct show {
	bool tty, open;       /* a progress line is being redrawn */
	char what[64];
	uint64_t t0, last;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	interrupted = 1;
}

static void human(char *buf, size_t len, double v)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static void draw(const struct show *s, const char *what, uint64_t done, uint64_t total, uint64_t now)
{
	double secs = (double)(now - s->t0) / 1e9;
	char d[24], t[24], r[24];

	human(d, sizeof(d), (double)done);
	human(t, sizeof(t), (double)total);
	human(r, sizeof(r), secs > 0.05 ? (double)done / secs : 0);
	if (total)
		fprintf(stderr, "[image] %s %s of %s (%d%%)", what, d, t, (int)(done * 100 / total));
	else
		fprintf(stderr, "[image] %s %s", what, d);
	if (secs > 0.05)
		fprintf(stderr, ", %s/s", r);
}

/* On a terminal a line redrawn at most 5 times a second; elsewhere one
 * line at the end of each step. */
static void show_progress(void *ctx, const char *what, uint64_t done, uint64_t total, bool final)
{
	struct show *s = ctx;
	uint64_t now = mono_ns();

	if (strcmp(s->what, what)) {
		snprintf(s->what, sizeof(s->what), "%s", what);
		s->t0 = now;
		s->last = 0;
	}
	if (!final && (!s->tty || now - s->last < 200000000ull))
		return;
	s->last = now;
	if (s->tty)
		fputs("\r\033[K", stderr);
	draw(s, what, done, total, now);
	if (final)
		fprintf(stderr, " in %.1f s\n", (double)(now - s->t0) / 1e9);
	s->open = s->tty && !final;
	fflush(stderr);
}

static void show_note(void *ctx, const char *line)
{
	struct show *s = ctx;

	if (s->open)
		fputc('\n', stderr);
	s->open = false;
	fprintf(stderr, "[image] %s\n", line);
}

/* Ctrl-C, SIGTERM, SIGHUP: the running step stops at its next block and
 * the temporary files go; the handlers do not restart system calls, so a
 * wait for the cache's lock ends too. */
static void catch_signals(struct sigaction old[3])
{
	static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
	struct sigaction sa = {.sa_handler = on_signal};

	interrupted = 0;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &sa, &old[i]);
}

static void restore_signals(const struct sigaction old[3])
{
	static const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};

	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &old[i], NULL);
}

/* hint: what to do about a URL without a checksum. */
static int do_import(const char *cmd, struct image_import_opts *o, const char *hint, char *path, size_t len)
{
	static const char *const how[] = {"NOT verified (no checksum)", "verified (--sha256)",
					  "verified (SOURCE.sha256)"};
	struct show s = {.tty = isatty(STDERR_FILENO)};
	struct image_progress p = {.fn = show_progress, .ctx = &s, .cancel = &interrupted};
	struct image_import_result r;
	struct sigaction old[3];
	char err[IMAGE_ERR_LEN + PATH_MAX];
	int rc;

	o->progress = &p;
	o->note = show_note;
	catch_signals(old);
	rc = image_import(o, &r, err, sizeof(err));
	restore_signals(old);
	if (s.open)
		fputc('\n', stderr);
	if (rc == -EPERM)
		return cli_fail(cmd, "%s: %s", err, hint);
	if (rc)
		return cli_fail(cmd, "%s", err);
	fprintf(stderr, "[image] %s '%s' (key %s) from %s; archive sha256 %s, %s\n",
		r.replaced ? "replaced" : "imported", r.name, r.key, o->source, r.sha_hex, how[r.verified]);
	snprintf(path, len, "%s", r.path);
	return 0;
}

/* NAME/KEY: that build; NAME: the one `kosa8 run --image NAME` boots. */
static int export_dir(const char *arg, char *dir, size_t len)
{
	char root[PATH_MAX], name[IMAGE_NAME_MAX + 1], path[PATH_MAX + 32];
	const char *slash = strchr(arg, '/');
	struct stat st;

	if (!slash) {
		if (!image_valid_name(arg) || cli_image_lookup(arg, path, sizeof(path)))
			return -ENOENT;
		snprintf(dir, len, "%s", dirname(path));
		return 0;
	}
	snprintf(name, sizeof(name), "%.*s", (int)(slash - arg), arg);
	if ((size_t)(slash - arg) > IMAGE_NAME_MAX || !image_valid_name(name) || !image_valid_key(slash + 1) ||
	    image_root(KOSA8_ARCH, root, sizeof(root)))
		return -ENOENT;
	if (snprintf(dir, len, "%s/%s", root, arg) >= (int)len)
		return -ENAMETOOLONG;
	snprintf(path, sizeof(path), "%s/" IMAGE_DISK, dir);
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? 0 : -ENOENT;
}

int cli_image_export_run(const char *what, const char *file, bool sums)
{
	struct show s = {.tty = isatty(STDERR_FILENO)};
	struct image_progress p = {.fn = show_progress, .ctx = &s, .cancel = &interrupted};
	char dir[PATH_MAX], err[IMAGE_ERR_LEN + PATH_MAX], hex[65];
	struct sigaction old[3];
	uint8_t sha[32];
	int rc;

	if (export_dir(what, dir, sizeof(dir)))
		return cli_fail("image export", "no image '%s' (see 'kosa8 image ls'; NAME or NAME/KEY)", what);
	fprintf(stderr, "[image] exporting %s to %s\n", dir, file);
	catch_signals(old);
	rc = image_export(dir, file, sums, &p, sha, err, sizeof(err));
	restore_signals(old);
	if (s.open)
		fputc('\n', stderr);
	if (rc)
		return cli_fail("image export", "%s", err);
	image_sha_hex(sha, hex);
	if (sums)
		fprintf(stderr, "[image] checksum written to %s.sha256\n", file);
	printf("%s  %s\n", hex, file);
	return 0;
}

int cli_image_import_run(struct image_import_opts *o)
{
	char path[PATH_MAX];

	if (do_import("image import", o, "give --sha256 HEX as its publisher lists it, or --no-verify to import it unchecked",
		      path, sizeof(path)))
		return 1;
	printf("%s\n", path);
	return 0;
}

static int image_from_source(const char *cmd, const char *name, char *path, size_t len)
{
	const char *src = getenv("KOSA8_IMAGE_SOURCE"), *want = getenv("KOSA8_IMAGE_SHA256");
	struct image_import_opts o = {.name = name};
	uint8_t sha[32];

	if (!src || !*src)
		return -ENOENT;
	if (want && !strcmp(want, "none"))
		o.no_verify = true;
	else if (want && *want && image_hex_sha(want, strlen(want), sha))
		return cli_fail(cmd, "KOSA8_IMAGE_SHA256 takes 64 hex digits or 'none' (got '%s')", want), -EINVAL;
	else if (want && *want)
		o.sha = sha;
	o.source = src;
	fprintf(stderr, "[image] the '%s' image is missing: importing it from KOSA8_IMAGE_SOURCE=%s\n", name, src);
	return do_import(cmd, &o, "set KOSA8_IMAGE_SHA256=HEX as its publisher lists it (or =none to import it unchecked)",
			 path, len) ? -EIO : 0;
}

/* kosa8-tools __image-from-source CMD NAME: cli_image_from_source's work,
 * the disk's path on stdout. */
int cmd_image_from_source(int argc, char **argv)
{
	char path[PATH_MAX];

	if (argc != 3)
		return cli_usage_error("__image-from-source", NULL);
	if (image_from_source(argv[1], argv[2], path, sizeof(path)))
		return 1;
	printf("%s\n", path);
	return 0;
}
