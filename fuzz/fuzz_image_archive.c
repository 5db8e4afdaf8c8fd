/* libFuzzer target: an image archive, as `kosa8 image import` reads one
 * from a path or a download (src/image/archive.c on libarchive: zstd, gzip,
 * xz or plain pax/GNU tar, sparse entries), unpacked into a scratch folder
 * (on /dev/shm when there is one).
 *
 * Every refusal says why.  What is accepted left exactly the image's files
 * in the folder (manifest.json, rootfs.ext4, the recipe if the archive had
 * one; the identity sidecar never), the disk as large as its manifest
 * says.  Nothing is ever written elsewhere: the folder's parent is checked
 * to hold only the folder.
 *
 *   fuzz/run.sh 60 image_archive */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/archive.h"

static char root[64], dir[80];

static int count_and_empty(const char *path, bool empty)
{
	struct dirent *e;
	DIR *d = opendir(path);
	int n = 0;

	if (!d)
		abort();
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		n++;
		if (empty && unlinkat(dirfd(d), e->d_name, 0))
			abort();
	}
	closedir(d);
	return n;
}

static void init(void)
{
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

	snprintf(root, sizeof(root), "%s/kosa8-fuzz-image-XXXXXX", base);
	if (!mkdtemp(root))
		abort();
	snprintf(dir, sizeof(dir), "%s/out", root);
	if (mkdir(dir, 0700))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[IMAGE_ERR_LEN] = "";
	struct image_unpacked u;
	struct stat st;
	int dfd, rc;

	if (!root[0])
		init();
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		abort();
	rc = image_archive_unpack_mem(data, size, dfd, &u, err, sizeof(err));
	if (rc && !err[0])
		abort();
	if (!rc) {
		if (fstatat(dfd, IMAGE_DISK, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode) ||
		    (uint64_t)st.st_size != u.m.virtual_size || faccessat(dfd, IMAGE_MANIFEST, F_OK, 0) ||
		    count_and_empty(dir, false) != 2 + u.has_recipe || !faccessat(dfd, IMAGE_ID_SIDECAR, F_OK, 0))
			abort();
	}
	close(dfd);
	if (count_and_empty(root, false) != 1)
		abort();
	count_and_empty(dir, true);
	return 0;
}
