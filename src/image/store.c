/* Where imported images live and which one a name stands for (import.h).
 * Apart from import.c so that the commands that only look an image up do
 * not link libarchive and libcurl (src/cli/tools.c says why that matters). */
#include "image/import.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

int image_root(const char *arch, char *buf, size_t len)
{
	char cache[PATH_MAX];
	int rc = kosa8_cache_dir(cache, sizeof(cache)), n;

	if (rc < 0)
		return rc;
	if (!arch || !strcmp(arch, "x86_64"))
		n = snprintf(buf, len, "%s/images", cache);
	else
		n = snprintf(buf, len, "%s/images-%s", cache, arch);
	return n >= 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

int image_find_imported(const char *root, const char *name, char *out, size_t len)
{
	char dir[PATH_MAX], path[PATH_MAX + 320];
	struct timespec best = {0};
	struct dirent *e;
	struct stat st;
	DIR *d;
	int rc = -ENOENT;

	if (!image_valid_name(name) || snprintf(dir, sizeof(dir), "%s/%s", root, name) >= (int)sizeof(dir) ||
	    !(d = opendir(dir)))
		return -ENOENT;
	while ((e = readdir(d))) {
		if (!image_valid_key(e->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s/" IMAGE_IMPORT_INFO, dir, e->d_name);
		if (access(path, F_OK))
			continue;
		snprintf(path, sizeof(path), "%s/%s/" IMAGE_DISK, dir, e->d_name);
		if (stat(path, &st) || !S_ISREG(st.st_mode) || strlen(path) >= len)
			continue;
		if (rc == 0 && (st.st_mtim.tv_sec < best.tv_sec ||
				(st.st_mtim.tv_sec == best.tv_sec && st.st_mtim.tv_nsec <= best.tv_nsec)))
			continue;
		best = st.st_mtim;
		memcpy(out, path, strlen(path) + 1);
		rc = 0;
	}
	closedir(d);
	return rc;
}
