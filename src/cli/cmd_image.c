/* kosa8 image: build, list and remove the Debian root filesystem images that
 * sandboxes boot from.  Building is guest/image/build.sh's job (mmdebstrap
 * and mkfs.ext4 are shell tools); this file finds and runs it, and reads the
 * cache it fills: <cache>/images/<name>/<key>/rootfs.ext4 (docs/images.md). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "disk/disk.h"
#include "image/import.h"

#define IMAGE_FILE "rootfs.ext4"
#define MAX_IMAGES 4096

struct image {
	char name[65];
	char key[65];
	uint64_t allocated, size;
	time_t built;
};

/* Same rule as build.sh: the name becomes a folder, so no '/' and no "..". */
static bool valid_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

static bool valid_key(const char *s)
{
	size_t n = strspn(s, "0123456789abcdef");

	return n == 16 && s[n] == '\0';
}

/* This architecture's images: build.sh keeps another's apart. */
static int images_dir(char *buf, size_t len)
{
	return image_root(KOSA8_ARCH, buf, len);
}

/* build.sh next to this binary: <bindir>/../guest/image in a checkout,
 * <prefix>/lib/kosa8/guest/image when installed. */
static int find_builder(char *buf, size_t len, char *bindir, size_t bindir_len)
{
	static const char *const rel[] = {"../guest/image/build.sh", "../lib/kosa8/guest/image/build.sh"};
	const char *env = getenv("KOSA8_IMAGE_BUILDER");
	ssize_t n = readlink("/proc/self/exe", bindir, bindir_len - 1);

	if (n < 0)
		return -errno;
	bindir[n] = '\0';
	*strrchr(bindir, '/') = '\0';
	if (env && *env)
		return snprintf(buf, len, "%s", env) < (int)len ? 0 : -ENAMETOOLONG;
	for (size_t i = 0; i < ARRAY_SIZE(rel); i++) {
		if (snprintf(buf, len, "%s/%s", bindir, rel[i]) < (int)len && access(buf, X_OK) == 0)
			return 0;
	}
	return -ENOENT;
}

/* Runs the builder with its stdout through a pipe: it is passed on, and its
 * last line (the image's path) kept in path. Returns the exit status. */
static int run_builder(const char *builder, const char *const *args, char *path, size_t len)
{
	char buf[4096];
	size_t have = 0;
	int fds[2], st;
	ssize_t n;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return 1;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "kosa8 image: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		execv(builder, (char *const *)args);
		fprintf(stderr, "kosa8 image: cannot run %s: %s\n", builder, strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	while ((n = read(fds[0], buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		fwrite(buf, 1, (size_t)n, stdout);
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] == '\n') {
				path[have] = '\0';
				have = 0;
			} else if (have + 1 < len) {
				path[have++] = buf[i];
			}
		}
	}
	close(fds[0]);
	fflush(stdout);
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR)
			return 1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* A sandbox disk identifies its base by a hash of every byte (disk.h);
 * computing it now, once, spares the first sandbox a long wait. */
static void identify(const char *path)
{
	char err[DISK_ERR_LEN], side[PATH_MAX + 16];
	uint8_t id[16];
	time_t t = time(NULL);
	bool quiet;

	/* Already computed (the image was up to date): checked silently. */
	snprintf(side, sizeof(side), "%s.kosa8-id", path);
	quiet = access(side, F_OK) == 0;
	if (!quiet)
		fprintf(stderr, "[image] identity for sandbox disks (hash of the image, once per image)\n");
	if (disk_base_id(path, id, err, sizeof(err)) < 0)
		fprintf(stderr, "[image] warning: %s (the first sandbox will hash it)\n", err);
	else if (!quiet || time(NULL) - t > 1)
		fprintf(stderr, "[image] identity done in %ld s\n", (long)(time(NULL) - t));
}

static int image_build(int argc, char **argv)
{
	char builder[PATH_MAX], bindir[PATH_MAX], agent[PATH_MAX + 16], path[PATH_MAX] = "";
	const char *args[10];
	int n = 0, rc;

	if (find_builder(builder, sizeof(builder), bindir, sizeof(bindir)) < 0) {
		fprintf(stderr, "kosa8 image: the image builder (guest/image/build.sh) is not installed next to kosa8\n");
		return 1;
	}
	args[n++] = builder;
	args[n++] = "--arch";
	args[n++] = KOSA8_ARCH;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--agent") && i + 1 < argc && n < 7) {
			args[n++] = argv[i++];
			args[n++] = argv[i];
		} else if (argv[i][0] != '-' && n < 8) {
			args[n++] = argv[i];
		} else {
			fprintf(stderr, "kosa8 image build: unexpected '%s'\n", argv[i]);
			return cli_usage_error("image", "build");
		}
	}
	args[n] = NULL;
	/* The agent built with this kosa8 (same build folder), or installed
	 * with it (<prefix>/lib/kosa8), unless told otherwise. */
	snprintf(agent, sizeof(agent), "%s/kosa8-agent", bindir);
	if (!getenv("KOSA8_AGENT") && access(agent, F_OK) == 0)
		setenv("KOSA8_AGENT", agent, 1);
	kosa8_use_installed_agent();
	rc = run_builder(builder, args, path, sizeof(path));
	if (rc == 0 && path[0] == '/')
		identify(path);
	return rc;
}

static int image_stat(struct image *im, const char *dir, const char *name, const char *key)
{
	char path[PATH_MAX];
	struct stat st;

	if (snprintf(path, sizeof(path), "%s/%s/%s/" IMAGE_FILE, dir, name, key) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return -ENOENT;
	snprintf(im->name, sizeof(im->name), "%.64s", name);
	snprintf(im->key, sizeof(im->key), "%.64s", key);
	im->allocated = (uint64_t)st.st_blocks * 512;
	im->size = (uint64_t)st.st_size;
	im->built = st.st_mtim.tv_sec;
	return 0;
}

/* Adds every <name>/<key>/rootfs.ext4 under dir; folders that start with
 * '.' are builds in progress or caches, not images.  Returns the count. */
static int scan_name(struct image *v, int n, const char *dir, const char *name)
{
	char path[PATH_MAX];
	struct dirent *e;
	DIR *d;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return n;
	d = opendir(path);
	if (!d)
		return n;
	while ((e = readdir(d)) && n < MAX_IMAGES) {
		if (e->d_name[0] != '.' && valid_key(e->d_name) && image_stat(&v[n], dir, name, e->d_name) == 0)
			n++;
	}
	closedir(d);
	return n;
}

static int image_cmp(const void *a, const void *b)
{
	const struct image *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	return (x->built < y->built) - (x->built > y->built); /* newest first */
}

static int scan_images(const char *dir, struct image **out)
{
	struct image *v = calloc(MAX_IMAGES, sizeof(*v));
	struct dirent *e;
	int n = 0;
	DIR *d;

	if (!v)
		return -ENOMEM;
	d = opendir(dir);
	if (d) {
		while ((e = readdir(d)) && n < MAX_IMAGES) {
			if (e->d_name[0] != '.' && valid_name(e->d_name))
				n = scan_name(v, n, dir, e->d_name);
		}
		closedir(d);
	} else if (errno != ENOENT) {
		int rc = -errno;
		free(v);
		return rc;
	}
	qsort(v, (size_t)n, sizeof(*v), image_cmp);
	*out = v;
	return n;
}

static void human(char *buf, size_t len, uint64_t v)
{
	static const char units[] = "BKMGT";
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 4) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 "B", v);
	else
		snprintf(buf, len, d < 10 ? "%.1f%c" : "%.0f%c", d, units[u]);
}

static void print_json(const struct image *v, int n)
{
	cJSON *arr = cJSON_CreateArray();
	char when[32], *s;

	for (int i = 0; i < n; i++) {
		cJSON *j = cJSON_CreateObject();
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&v[i].built));
		cJSON_AddStringToObject(j, "name", v[i].name);
		cJSON_AddStringToObject(j, "key", v[i].key);
		cJSON_AddNumberToObject(j, "allocated_bytes", (double)v[i].allocated);
		cJSON_AddNumberToObject(j, "virtual_bytes", (double)v[i].size);
		cJSON_AddStringToObject(j, "built", when);
		cJSON_AddItemToArray(arr, j);
	}
	s = cJSON_Print(arr);
	if (s)
		printf("%s\n", s);
	free(s);
	cJSON_Delete(arr);
}

static int image_ls(int argc, char **argv)
{
	char dir[PATH_MAX] = "", alloc[16], size[16], when[32];
	bool json = argc == 2 && !strcmp(argv[1], "--json");
	struct image *v;
	int n;

	if (argc > 2 || (argc == 2 && !json)) {
		fprintf(stderr, "kosa8 image ls: unexpected '%s'\n", argv[argc - 1]);
		return 2;
	}
	if (images_dir(dir, sizeof(dir)) < 0 || (n = scan_images(dir, &v)) < 0) {
		fprintf(stderr, "kosa8 image: cannot read the image cache %s\n", dir);
		return 1;
	}
	if (json) {
		print_json(v, n);
	} else {
		printf("%-20s %-16s %8s %8s  %s\n", "NAME", "KEY", "SIZE", "VIRTUAL", "BUILT");
		for (int i = 0; i < n; i++) {
			human(alloc, sizeof(alloc), v[i].allocated);
			human(size, sizeof(size), v[i].size);
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M", localtime(&v[i].built));
			printf("%-20s %-16s %8s %8s  %s\n", v[i].name, v[i].key, alloc, size, when);
		}
	}
	free(v);
	return 0;
}

static int image_path(int argc, char **argv)
{
	const char *name = argc == 2 ? argv[1] : "default";
	char dir[PATH_MAX] = "";
	struct image *v;
	int n, rc = 1;

	if (argc > 2 || !valid_name(name)) {
		fprintf(stderr, "kosa8 image path: '%s' is not an image name\n", argc > 2 ? argv[2] : name);
		return 2;
	}
	if (images_dir(dir, sizeof(dir)) < 0 || (n = scan_images(dir, &v)) < 0) {
		fprintf(stderr, "kosa8 image: cannot read the image cache %s\n", dir);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		if (!strcmp(v[i].name, name)) {
			printf("%s/%s/%s/" IMAGE_FILE "\n", dir, v[i].name, v[i].key);
			rc = 0;
			break;
		}
	}
	if (rc)
		fprintf(stderr, "kosa8 image: no image named '%s' (see 'kosa8 image ls'; build it with 'kosa8 image build %s')\n",
			name, name);
	free(v);
	return rc;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (remove(path) < 0) {
		fprintf(stderr, "kosa8 image: cannot remove %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* NAME/KEY: one build; NAME: every build and the name's folder. */
static int image_rm(const char *arg)
{
	char dir[PATH_MAX], target[PATH_MAX + 160], lock[PATH_MAX + 8], name[65] = "";
	const char *slash = strchr(arg, '/'), *key = slash ? slash + 1 : NULL;
	size_t nlen = slash ? (size_t)(slash - arg) : strlen(arg);
	struct stat st;
	int fd, rc = 1;

	if (nlen < sizeof(name)) {
		memcpy(name, arg, nlen);
		name[nlen] = '\0';
	}
	if (!valid_name(name) || (key && !valid_key(key))) {
		fprintf(stderr, "kosa8 image rm: '%s' is not NAME or NAME/KEY (KEY: 16 hex digits, see 'kosa8 image ls')\n", arg);
		return 2;
	}
	if (images_dir(dir, sizeof(dir)) < 0) {
		fprintf(stderr, "kosa8 image: cannot find the cache folder (set KOSA8_CACHE_DIR or HOME)\n");
		return 1;
	}
	snprintf(target, sizeof(target), "%s/%s%s%s", dir, name, key ? "/" : "", key ? key : "");
	if (lstat(target, &st) < 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "kosa8 image: no image '%s' (see 'kosa8 image ls')\n", arg);
		return 1;
	}
	/* build.sh holds this lock for the whole build. */
	snprintf(lock, sizeof(lock), "%s/.lock", dir);
	fd = open(lock, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr, "kosa8 image: an image build is running (%s is locked); try again when it ends\n", lock);
		goto out;
	}
	if (nftw(target, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0)
		goto out;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

static int image_prune(int argc, char **argv)
{
	bool all = false;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--all"))
			return cli_fail("image prune", "unknown option '%s' (see 'kosa8 image prune --help')",
					argv[i]), 2;
		all = true;
	}
	return cli_template_prune(all);
}

/* The work is cmd_image_io.c's; the options are parsed here, with the
 * rest of the command's. */
static int image_import_cmd(int argc, char **argv)
{
	static const struct option opts[] = {
		{"name", required_argument, NULL, 'n'}, {"sha256", required_argument, NULL, 's'},
		{"no-verify", no_argument, NULL, 'N'}, {"force", no_argument, NULL, 'f'},
		{NULL, 0, NULL, 0},
	};
	struct image_import_opts o = {0};
	uint8_t sha[32];
	int c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'n': o.name = optarg; break;
		case 'N': o.no_verify = true; break;
		case 'f': o.force = true; break;
		case 's':
			if (image_hex_sha(optarg, strlen(optarg), sha))
				return cli_fail("image import", "--sha256 takes 64 hex digits (got '%s')", optarg), 2;
			o.sha = sha;
			break;
		default:
			return cli_fail("image import", "unknown option '%s' (see 'kosa8 image import --help')",
					argv[optind - 1]), 2;
		}
	}
	if (optind != argc - 1)
		return cli_usage_error("image", "import");
	if (o.sha && o.no_verify)
		return cli_fail("image import", "%s", "--sha256 and --no-verify contradict each other"), 2;
	o.source = argv[optind];
	return cli_image_import_run(&o);
}

static int image_export_cmd(int argc, char **argv)
{
	static const struct option opts[] = {{"sha256-file", no_argument, NULL, 's'}, {NULL, 0, NULL, 0}};
	bool sums = false;
	int c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c != 's')
			return cli_fail("image export", "unknown option '%s' (see 'kosa8 image export --help')",
					argv[optind - 1]), 2;
		sums = true;
	}
	if (optind != argc - 2)
		return cli_usage_error("image", "export");
	return cli_image_export_run(argv[optind], argv[optind + 1], sums);
}

int cmd_image(int argc, char **argv)
{
	if (argc < 2)
		return cli_usage_error("image", NULL);
	if (!strcmp(argv[1], "build"))
		return image_build(argc - 1, argv + 1);
	if (!strcmp(argv[1], "ls"))
		return image_ls(argc - 1, argv + 1);
	if (!strcmp(argv[1], "path"))
		return image_path(argc - 1, argv + 1);
	if (!strcmp(argv[1], "rm") && argc == 3)
		return image_rm(argv[2]);
	if (!strcmp(argv[1], "warm"))
		return cli_image_warm(argc - 1, argv + 1);
	if (!strcmp(argv[1], "prune"))
		return image_prune(argc - 1, argv + 1);
	/* Their libraries are kosa8-tools' (tools.c). */
	if (!strcmp(argv[1], "export"))
		return cli_image_export_run ? image_export_cmd(argc - 1, argv + 1) : cli_exec_tools();
	if (!strcmp(argv[1], "import"))
		return cli_image_import_run ? image_import_cmd(argc - 1, argv + 1) : cli_exec_tools();
	fprintf(stderr, "kosa8 image: unknown or incomplete subcommand '%s'\n", argv[1]);
	return cli_usage_error("image", argv[1]);
}
