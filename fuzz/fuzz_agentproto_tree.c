/* libFuzzer target: the tree-stream extractor (ap_tw_frame) and the
 * guarded writer under it (common/guarded.c), the code that writes a
 * peer's files (agent put, host get: kosa8 cp, diff, export).  The input
 * is a sequence of frames applied to a fresh directory <tmp>/N/root, which
 * holds two links the host made (out -> ../hostdir, abs -> /) beside a
 * marker file and an empty directory.  After each input the fuzzer checks
 * that nothing escaped: the marker and hostdir are as they were, nothing
 * new appeared beside root, every link the stream left in root resolves
 * beneath it, and no file there kept a setuid, setgid or sticky bit.
 * Then it removes root. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agentproto/tree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char base[64];

static void rm_rf(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
	if (fd >= 0) {
		DIR *d = fdopendir(fd);
		struct dirent *de;
		while (d && (de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				rm_rf(dirfd(d), de->d_name);
		if (d)
			closedir(d);
		else
			close(fd);
		unlinkat(dfd, name, AT_REMOVEDIR);
	} else {
		unlinkat(dfd, name, 0);
	}
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	if (d)
		closedir(d);
	return n;
}

static void escaped(const char *what)
{
	fprintf(stderr, "tree writer escaped its root: %s\n", what);
	abort();
}

/* Walks root: links must resolve beneath it, files keep no special bit. */
static void check_tree(int rootfd, int dfd, char *path, size_t len)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	struct stat st;
	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    snprintf(path + len, 4200 - len, "%s%s", len ? "/" : "", de->d_name) >= (int)(4200 - len))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (st.st_mode & 07000)
			escaped("a special mode bit was kept");
		if (S_ISLNK(st.st_mode) && strcmp(path, "out") && strcmp(path, "abs")) {
			struct open_how how = { .flags = O_PATH, .resolve = RESOLVE_BENEATH };
			long fd = syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
			if (fd >= 0)
				close((int)fd);
			else if (errno == EXDEV)
				escaped(path);
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
			if (sub >= 0)
				check_tree(rootfd, sub, path, strlen(path));
		}
		path[len] = 0;
	}
	if (d)
		closedir(d);
}

static void setup_base(void)
{
	char p[128];
	snprintf(base, sizeof(base), "/tmp/kosa8-fuzz-tree-XXXXXX");
	if (!mkdtemp(base))
		abort();
	snprintf(p, sizeof(p), "%s/marker", base);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || write(fd, "marker", 6) != 6)
		abort();
	close(fd);
	snprintf(p, sizeof(p), "%s/hostdir", base);
	if (mkdir(p, 0700))
		abort();
}

static void check_outside(void)
{
	char p[128];
	struct stat st;
	snprintf(p, sizeof(p), "%s/marker", base);
	if (stat(p, &st) || st.st_size != 6 || (st.st_mode & 07777) != 0600 || st.st_nlink != 1)
		escaped("the marker changed");
	snprintf(p, sizeof(p), "%s/hostdir", base);
	if (count_entries(p) != 0)
		escaped("something appeared in hostdir");
	if (count_entries(base) != 3)
		escaped("something appeared beside root");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ap_tree_writer w;
	struct gw_opts o = { .mode_mask = 0777, .max_bytes = 1 << 20, .max_entries = 4096 };
	char root[96], p[128], path[4200] = "";
	if (!base[0])
		setup_base();
	snprintf(root, sizeof(root), "%s/root", base);
	if (mkdir(root, 0755))
		abort();
	snprintf(p, sizeof(p), "%s/out", root);
	if (symlink("../hostdir", p))
		abort();
	snprintf(p, sizeof(p), "%s/abs", root);
	if (symlink("/", p))
		abort();
	if (ap_tw_open(&w, root, &o))
		abort();
	size_t off = 0;
	while (size - off >= AP_HDR_SIZE) {
		struct ap_frame f;
		if (ap_hdr_decode(data + off, &f.h))
			break;
		off += AP_HDR_SIZE;
		if (f.h.len > size - off)
			f.h.len = (uint32_t)(size - off);
		f.p = data + off;
		off += f.h.len;
		if (ap_tw_frame(&w, &f) != 0)
			break;
	}
	ap_tw_close(&w);
	check_outside();
	int rfd = open(root, O_RDONLY | O_DIRECTORY);
	if (rfd < 0)
		abort();
	int dfd = dup(rfd);
	check_tree(rfd, dfd, path, 0);
	close(rfd);
	rm_rf(AT_FDCWD, root);
	return 0;
}
