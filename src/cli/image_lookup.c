/* Which image a name stands for: the build of its recipe, else the newest
 * imported one (docs/images.md).  Apart from cmd_image_io.c, which imports
 * and exports with libarchive and libcurl: kosa8 leaves those to
 * kosa8-tools (tools.c). */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "image/import.h"
#include "sandbox/lookup.h"

/* The answer and what it depends on, from SCRIPT --path --inputs's output
 * (lines "file PATH", "env NAME", then the path); pointers into out. */
static int split_inputs(char *out, struct lookup_deps *d, const char **answer)
{
	char *line = out, *nl;

	memset(d, 0, sizeof(*d));
	*answer = NULL;
	for (; *line; line = nl + 1) {
		if (!(nl = strchr(line, '\n')))
			return -EIO; /* the answer ends with one too */
		*nl = 0;
		if (!strncmp(line, "file ", 5) && d->nfiles < LOOKUP_DEPS_MAX)
			d->files[d->nfiles++] = line + 5;
		else if (!strncmp(line, "env ", 4) && d->nenv < LOOKUP_DEPS_MAX)
			d->env[d->nenv++] = line + 4;
		else if (line[0] == '/' && !nl[1])
			*answer = line;
		else
			return -EIO;
	}
	return *answer ? 0 : -EIO;
}

/* What `SCRIPT --path ARG` answers (guest/image/build.sh: the image a
 * name stands for), remembered while its inputs stay as they were
 * (sandbox/lookup.h): the script runs some fifty processes, which every
 * create would pay again. */
static int script_path(const char *script, const char *arg, char *out, size_t len)
{
	char path[PATH_MAX], cache[PATH_MAX], cwd[PATH_MAX] = "", q[3 * PATH_MAX + 32], *text;
	const char *argv[7] = {path, "--arch", KOSA8_ARCH, "--path", "--inputs", arg, NULL}, *answer;
	struct lookup_deps d;
	bool cached;
	int err, n;

	if ((err = kosa8_data_path(script, path, sizeof(path))))
		return err;
	kosa8_use_installed_agent();
	/* A relative recipe name may be a file in the working directory. */
	if (!getcwd(cwd, sizeof(cwd)))
		cwd[0] = 0;
	n = snprintf(q, sizeof(q), "script --path\n%s\n%s\n%s", path, arg, cwd);
	cached = n > 0 && (size_t)n < sizeof(q) && lookup_path(q, (size_t)n, cache, sizeof(cache)) == 0;
	if (cached && lookup_load(cache, out, len) == 0)
		return 0;
	if (!(text = malloc(LOOKUP_FILE_MAX)))
		return -ENOMEM;
	if (!(err = run_for_output(argv, text, LOOKUP_FILE_MAX)) &&
	    !(err = split_inputs(text, &d, &answer))) {
		if (strlen(answer) >= len)
			err = -ENAMETOOLONG;
		else
			memcpy(out, answer, strlen(answer) + 1);
	}
	/* Not remembered (a file too new, a full disk): looked up next time. */
	if (!err && cached)
		lookup_store(cache, &d, answer);
	free(text);
	return err;
}

int cli_image_lookup(const char *name, char *out, size_t len)
{
	char root[PATH_MAX];

	if (script_path("guest/image/build.sh", name, out, len) == 0)
		return 0;
	if (image_root(KOSA8_ARCH, root, sizeof(root)))
		return -ENOENT;
	return image_find_imported(root, name, out, len);
}
