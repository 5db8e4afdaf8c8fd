/* The guarded writer (common/guarded.h) against every shape of attack a
 * guest's tree can take: each test builds a fresh destination beside a
 * host "marker" file and directory, and checks after the attack that the
 * markers are as they were and nothing appeared beside the destination. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/guarded.h"
#include "tmp_dir.h"

static char dest[96], marker[96], hostdir[96];

#define MARKER_TEXT "host marker\n"

/* tmp/N/{dest, marker, hostdir/}: a fresh set per test. */
static void fresh(struct gw *g, const struct gw_opts *o)
{
	static int n;
	char base[80];
	snprintf(base, sizeof(base), "%s/%d", tmp, ++n);
	assert_int_equal(mkdir(base, 0755), 0);
	snprintf(dest, sizeof(dest), "%s/dest", base);
	snprintf(marker, sizeof(marker), "%s/marker", base);
	snprintf(hostdir, sizeof(hostdir), "%s/hostdir", base);
	assert_int_equal(mkdir(dest, 0755), 0);
	assert_int_equal(mkdir(hostdir, 0755), 0);
	int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, MARKER_TEXT, strlen(MARKER_TEXT)), (ssize_t)strlen(MARKER_TEXT));
	close(fd);
	if (g)
		assert_int_equal(gw_open(g, dest, o), 0);
}

/* The marker holds its text with mode 0600, hostdir is empty, and the set
 * holds nothing but dest, marker and hostdir. */
static void markers_untouched(void)
{
	char buf[64] = "";
	struct stat st;
	int fd = open(marker, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, sizeof(buf) - 1), (ssize_t)strlen(MARKER_TEXT));
	assert_int_equal(fstat(fd, &st), 0);
	close(fd);
	assert_string_equal(buf, MARKER_TEXT);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_nlink, 1);
	assert_int_equal(rmdir(hostdir), 0); /* empty */
	assert_int_equal(mkdir(hostdir, 0755), 0);
	char base[96];
	snprintf(base, sizeof(base), "%.*s/escaped", (int)(strrchr(dest, '/') - dest), dest);
	assert_int_equal(lstat(base, &st), -1);
}

static int put(struct gw *g, const char *path, const char *text, uint32_t mode)
{
	int fd = gw_file(g, path, strlen(text));
	if (fd < 0)
		return fd;
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	return gw_file_done(g, fd, mode);
}

/* dest/rel, for one call at a time (the buffer is reused). */
static const char *in_dest(const char *rel)
{
	static char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dest, rel);
	return p;
}

static bool exists_in_dest(const char *rel)
{
	struct stat st;
	return lstat(in_dest(rel), &st) == 0;
}

static void test_good_tree(void **state)
{
	struct gw g;
	char buf[16];
	fresh(&g, NULL);
	assert_int_equal(gw_dir(&g, "d", 0755), 0);
	assert_int_equal(put(&g, "d/f", "hello", 0644), 0);
	assert_int_equal(gw_symlink(&g, "d/l", "f"), 0);
	assert_int_equal(gw_symlink(&g, "d/up", "../d/f"), 0);
	assert_int_equal(gw_symlink(&g, "dangling", "no/such"), 0);
	assert_int_equal(gw_finish(&g), 0);
	gw_close(&g);
	int fd = open(in_dest("d/up"), O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, sizeof(buf)), 5);
	close(fd);
	assert_true(exists_in_dest("dangling"));
	markers_untouched();
}

static void test_names_refused(void **state)
{
	static const char *bad[] = {"..", "../escaped", "a/../../escaped", "/abs", "a//b", "a/",
				    ".", "./a", "a/./b", ""};
	char longname[NAME_MAX + 2], longpath[GW_MAX_PATH + 2];
	struct gw g;
	fresh(&g, NULL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(gw_file(&g, bad[i], 1), -EBADMSG);
		assert_int_equal(gw_dir(&g, bad[i], 0755), -EBADMSG);
		assert_int_equal(gw_symlink(&g, bad[i], "x"), -EBADMSG);
	}
	assert_int_equal(gw_path_check("a\0b", 3), -EBADMSG);
	memset(longname, 'n', NAME_MAX + 1);
	longname[NAME_MAX + 1] = 0;
	assert_int_equal(gw_file(&g, longname, 1), -EBADMSG);
	longname[NAME_MAX] = 0;
	assert_int_equal(gw_path_check(longname, NAME_MAX), 0);
	memset(longpath, 'a', sizeof(longpath) - 1);
	for (size_t i = 100; i < sizeof(longpath) - 1; i += 100)
		longpath[i] = '/';
	longpath[GW_MAX_PATH + 1] = 0;
	assert_int_equal(gw_dir(&g, longpath, 0755), -EBADMSG);
	gw_close(&g);
	markers_untouched();
}

static void test_symlink_targets_refused(void **state)
{
	char t[PATH_MAX];
	struct gw g;
	fresh(&g, NULL);
	/* Absolute, and relative climbing out. */
	assert_int_equal(gw_symlink(&g, "abs", marker), -EXDEV);
	assert_int_equal(gw_symlink(&g, "root", "/"), -EXDEV);
	assert_int_equal(gw_symlink(&g, "up", "../marker"), -EXDEV);
	assert_int_equal(gw_dir(&g, "d", 0755), 0);
	assert_int_equal(gw_symlink(&g, "d/up", "../../marker"), -EXDEV);
	assert_int_equal(gw_symlink(&g, "d/up2", "x/../../../marker"), -EXDEV);
	snprintf(t, sizeof(t), "../..%s", marker);
	assert_int_equal(gw_symlink(&g, "d/up3", t), -EXDEV);
	assert_int_equal(gw_finish(&g), 0);
	gw_close(&g);
	assert_false(exists_in_dest("abs") || exists_in_dest("root") || exists_in_dest("up") ||
		     exists_in_dest("d/up") || exists_in_dest("d/up2") || exists_in_dest("d/up3"));
	markers_untouched();
}

/* The chain: d1/.../d6/p -> ../../../../../.. (the root, lexically
 * fine), then a link through p climbing six more: lexically inside, really
 * outside.  A climb after a name is refused when the link is made, writing
 * through p is refused (no link is a parent), and the finished tree keeps
 * no link that leads out. */
static void test_link_chain_escape(void **state)
{
	struct gw g;
	fresh(&g, NULL);
	assert_int_equal(gw_parents(&g, "d1/d2/d3/d4/d5/d6/p"), 0);
	assert_int_equal(gw_symlink(&g, "d1/d2/d3/d4/d5/d6/p", "../../../../../.."), 0);
	/* p is dest itself, so p/.. is dest's parent, where the marker is. */
	assert_int_equal(gw_symlink(&g, "ca.crt", "d1/d2/d3/d4/d5/d6/p/../marker"), -EXDEV);
	assert_int_equal(gw_symlink(&g, "hd", "d1/d2/d3/d4/d5/d6/p/../hostdir"), -EXDEV);
	assert_non_null(strstr(g.err, "leaves the destination"));
	/* Writing through the link: refused, never followed. */
	assert_int_equal(put(&g, "d1/d2/d3/d4/d5/d6/p/escaped", "evil", 0644), -ELOOP);
	assert_int_equal(gw_dir(&g, "d1/d2/d3/d4/d5/d6/p/sub", 0755), -ELOOP);
	assert_int_equal(gw_parents(&g, "d1/d2/d3/d4/d5/d6/p/a/b"), -ELOOP);
	assert_int_equal(gw_remove(&g, "d1/d2/d3/d4/d5/d6/p/x"), -ELOOP);
	assert_int_equal(gw_finish(&g), 0);
	gw_close(&g);
	assert_false(exists_in_dest("ca.crt"));
	assert_false(exists_in_dest("hd"));
	assert_true(exists_in_dest("d1/d2/d3/d4/d5/d6/p")); /* the root itself: inside */
	markers_untouched();
}

/* Two trees written one after the other into the same destination (two
 * kosa8 cp, two diff --apply): the first leaves a dangling link that climbs
 * through a name not yet there, the second makes that name a link that is
 * itself inside.  Each sweep only sees its own links, so the climb through
 * a link must be refused when the link is made. */
static void test_link_chain_across_streams(void **state)
{
	struct gw g;
	fresh(&g, NULL);
	assert_int_equal(gw_dir(&g, "d", 0755), 0);
	assert_int_equal(gw_symlink(&g, "d/x", "sub/../marker"), -EXDEV);
	assert_int_equal(gw_symlink(&g, "d/y", "sub/./../hostdir"), -EXDEV);
	assert_int_equal(gw_finish(&g), 0);
	gw_close(&g);
	assert_int_equal(gw_open(&g, dest, NULL), 0);
	assert_int_equal(gw_symlink(&g, "d/sub", ".."), 0);
	assert_int_equal(gw_finish(&g), 0);
	gw_close(&g);
	assert_int_equal(open(in_dest("d/x"), O_RDONLY), -1);
	assert_false(exists_in_dest("d/x") || exists_in_dest("d/y"));
	/* Climbing first, then down, stays allowed. */
	assert_int_equal(gw_open(&g, dest, NULL), 0);
	assert_int_equal(gw_symlink(&g, "d/z", "../d/./sub"), 0);
	assert_int_equal(gw_finish(&g), 0);
	gw_close(&g);
	markers_untouched();
}

/* Links the host already had in the destination are never followed, and a
 * guest link that reaches one, made before or after the link that leads
 * it there, is removed. */
static void test_host_links_in_dest(void **state)
{
	struct gw g;
	fresh(NULL, NULL);
	assert_int_equal(symlink(hostdir, in_dest("out")), 0);
	assert_int_equal(mkdir(in_dest("real"), 0755), 0);
	assert_int_equal(symlink("/", in_dest("real/sub")), 0);
	assert_int_equal(gw_open(&g, dest, NULL), 0);
	assert_int_equal(put(&g, "out/escaped", "evil", 0644), -ELOOP);
	assert_int_equal(gw_dir(&g, "out", 0755), -ENOTDIR);
	/* Made first, dangling; then m makes it reach real/sub -> /. */
	assert_int_equal(gw_symlink(&g, "l", "m/sub/etc"), 0);
	assert_int_equal(gw_symlink(&g, "m", "real"), 0);
	assert_int_equal(gw_symlink(&g, "viaout", "out"), 0);
	assert_int_equal(gw_finish(&g), -EXDEV);
	gw_close(&g);
	assert_false(exists_in_dest("l"));
	assert_false(exists_in_dest("viaout"));
	assert_true(exists_in_dest("m"));
	/* A file entry at the host link's name replaces the link itself. */
	assert_int_equal(gw_open(&g, dest, NULL), 0);
	assert_int_equal(put(&g, "out", "data", 0644), 0);
	gw_close(&g);
	struct stat st;
	assert_int_equal(lstat(in_dest("out"), &st), 0);
	assert_true(S_ISREG(st.st_mode));
	markers_untouched();
}

/* A hard link or a FIFO at a file's name is replaced, never written
 * through nor opened. */
static void test_existing_hardlink_and_fifo(void **state)
{
	struct gw g;
	fresh(NULL, NULL);
	assert_int_equal(link(marker, in_dest("hl")), 0);
	assert_int_equal(mkfifo(in_dest("fifo"), 0644), 0);
	assert_int_equal(gw_open(&g, dest, NULL), 0);
	assert_int_equal(put(&g, "hl", "evil", 0666), 0);
	assert_int_equal(put(&g, "fifo", "data", 0644), 0); /* would block if opened */
	gw_close(&g);
	markers_untouched();
}

static void test_special_kinds_refused(void **state)
{
	struct gw g;
	fresh(&g, NULL);
	assert_int_equal(gw_refuse(&g, "dev", "a device node"), -EPERM);
	assert_non_null(strstr(g.err, "dev: a device node"));
	assert_non_null(strstr(g.err, "only files, directories and symlinks"));
	gw_close(&g);
}

static void test_modes_and_owner(void **state)
{
	struct gw_opts o = { .mode_mask = 0755 };
	struct stat st;
	struct gw g;
	if (geteuid() == 0) {
		o.chown = true;
		o.uid = 65534;
		o.gid = 65534;
	}
	fresh(&g, &o);
	assert_int_equal(put(&g, "suid", "x", 06777), 0);
	assert_int_equal(gw_dir(&g, "sticky", 01777), 0);
	assert_int_equal(put(&g, "plain", "x", 0644), 0);
	assert_int_equal(g.special_dropped, 2);
	gw_close(&g);
	assert_int_equal(stat(in_dest("suid"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	if (o.chown)
		assert_int_equal(st.st_uid, 65534);
	assert_int_equal(stat(in_dest("sticky"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	/* The default mask: the umask, no special bits. */
	mode_t um = umask(027);
	fresh(&g, NULL);
	umask(um);
	assert_int_equal(put(&g, "f", "x", 04777), 0);
	gw_close(&g);
	assert_int_equal(stat(in_dest("f"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0750);
	markers_untouched();
}

static void test_bounds(void **state)
{
	struct gw_opts o = { .max_bytes = 10, .max_entries = 4 };
	struct gw g;
	fresh(&g, &o);
	assert_int_equal(put(&g, "a", "12345", 0644), 0);
	assert_int_equal(put(&g, "b", "123456", 0644), -EDQUOT);
	assert_non_null(strstr(g.err, "bound"));
	assert_false(exists_in_dest("b"));
	assert_int_equal(put(&g, "c", "1234", 0644), 0);
	assert_int_equal(gw_dir(&g, "d", 0755), 0);
	assert_int_equal(gw_symlink(&g, "e", "a"), 0);
	assert_int_equal(gw_dir(&g, "f", 0755), -EDQUOT);
	gw_close(&g);
	markers_untouched();
}

/* A link's target is data on the host disk too (a block each once it is
 * long): a million links of 4 KiB targets must not pass a byte bound that
 * files are held to. */
static void test_link_bytes_bounded(void **state)
{
	struct gw_opts o = { .max_bytes = 1000 };
	char target[301], name[16];
	struct gw g;
	fresh(&g, &o);
	memset(target, 'x', 300);
	target[300] = 0;
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "l%d", i);
		assert_int_equal(gw_symlink(&g, name, target), 0);
	}
	assert_int_equal(gw_symlink(&g, "l3", target), -EDQUOT);
	assert_non_null(strstr(g.err, "bound"));
	assert_false(exists_in_dest("l3"));
	/* 900 bytes used: files get the 100 left, no more. */
	target[101] = 0;
	assert_int_equal(put(&g, "f", target, 0644), -EDQUOT);
	target[100] = 0;
	assert_int_equal(put(&g, "g", target, 0644), 0);
	gw_close(&g);
	markers_untouched();
}

static void test_open_read(void **state)
{
	uint64_t size;
	int dfd;
	fresh(NULL, NULL);
	assert_int_equal(mkfifo(in_dest("fifo"), 0644), 0);
	assert_int_equal(symlink(marker, in_dest("link")), 0);
	assert_int_equal(symlink(hostdir, in_dest("d")), 0);
	dfd = open(dest, O_RDONLY | O_DIRECTORY);
	assert_true(dfd >= 0);
	assert_int_equal(gw_open_read(dfd, "fifo", 0, &size), -EINVAL); /* at once */
	assert_int_equal(gw_open_read(dfd, "link", 0, &size), -ELOOP);
	assert_int_equal(gw_open_read(dfd, "d/x", 0, &size), -ELOOP);
	assert_int_equal(gw_open_read(dfd, "../marker", 0, &size), -EXDEV);
	int fd = open(in_dest("f"), O_WRONLY | O_CREAT, 0644);
	assert_int_equal(write(fd, "0123456789", 10), 10);
	close(fd);
	assert_int_equal(gw_open_read(dfd, "f", 9, &size), -EFBIG);
	fd = gw_open_read(dfd, "f", 10, &size);
	assert_true(fd >= 0);
	assert_int_equal(size, 10);
	close(fd);
	char buf[16];
	assert_int_equal(gw_read_link(dfd, "link", buf, sizeof(buf)), -ENAMETOOLONG);
	assert_int_equal(gw_read_link(dfd, "d/x", buf, sizeof(buf)), -ELOOP);
	close(dfd);
	markers_untouched();
}

static void test_remove(void **state)
{
	struct gw g;
	fresh(&g, NULL);
	assert_int_equal(gw_parents(&g, "a/b/f"), 0);
	assert_int_equal(put(&g, "a/b/f", "x", 0644), 0);
	assert_int_equal(gw_remove(&g, "a/b/f"), 0);
	assert_false(exists_in_dest("a")); /* emptied folders go too */
	assert_int_equal(gw_remove(&g, "never/there"), 0);
	assert_int_equal(gw_dir(&g, "dir", 0755), 0);
	assert_int_equal(gw_remove(&g, "dir"), -EISDIR);
	assert_int_equal(symlink(hostdir, in_dest("hl")), 0);
	assert_int_equal(gw_remove(&g, "hl/x"), -ELOOP);
	gw_close(&g);
	markers_untouched();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_tree),
		cmocka_unit_test(test_names_refused),
		cmocka_unit_test(test_symlink_targets_refused),
		cmocka_unit_test(test_link_chain_escape),
		cmocka_unit_test(test_link_chain_across_streams),
		cmocka_unit_test(test_host_links_in_dest),
		cmocka_unit_test(test_existing_hardlink_and_fifo),
		cmocka_unit_test(test_special_kinds_refused),
		cmocka_unit_test(test_modes_and_owner),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_link_bytes_bounded),
		cmocka_unit_test(test_open_read),
		cmocka_unit_test(test_remove),
	};
	return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
