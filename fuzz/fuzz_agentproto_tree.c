/* libFuzzer target: the tree-stream extractor (ap_tw_frame), the code that
 * writes a peer's files (agent put, host get).  The input is a sequence of
 * frames applied to a fresh directory <tmp>/N/root; after each input the
 * fuzzer checks that nothing appeared next to root (in <tmp>/N) — an escape
 * — and then removes the directory. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

static void remove_base(void)
{
	rmdir(base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ap_tree_writer w;
	char root[96];
	if (!base[0]) {
		snprintf(base, sizeof(base), "/tmp/kosa8-fuzz-tree-XXXXXX");
		if (!mkdtemp(base))
			abort();
		atexit(remove_base);
	}
	snprintf(root, sizeof(root), "%s/root", base);
	if (ap_tw_open(&w, root, NULL))
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
	/* Only root may exist in base: anything else escaped. */
	if (count_entries(base) != 1) {
		fprintf(stderr, "tree writer escaped its root\n");
		abort();
	}
	rm_rf(AT_FDCWD, root);
	return 0;
}
