/* kosa8 disk: create and inspect layered copy-on-write disks (the sandbox
 * commands do this for you; this is the low-level tool, like `kosa8 vm`). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "disk/disk.h"

static int disk_create_cmd(int argc, char **argv)
{
	struct disk_create_opts o = {0};
	const char *path = NULL, *base = NULL;
	char err[DISK_ERR_LEN];
	uint64_t v;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--base") && i + 1 < argc) {
			base = argv[++i];
		} else if ((!strcmp(argv[i], "--size") || !strcmp(argv[i], "--cluster")) && i + 1 < argc) {
			if (parse_size(argv[i + 1], &v) < 0 || (argv[i][2] == 'c' && v > UINT32_MAX)) {
				fprintf(stderr, "kosa8 disk: %s takes a size such as 64K or 10G\n", argv[i]);
				return 2;
			}
			if (argv[i][2] == 's')
				o.size = v;
			else
				o.cluster_size = (uint32_t)v;
			i++;
		} else if (argv[i][0] != '-' && !path) {
			path = argv[i];
		} else {
			fprintf(stderr, "kosa8 disk create: unexpected '%s'\n", argv[i]);
			return cli_usage_error("disk", "create");
		}
	}
	if (!path || (!base && !o.size)) {
		fprintf(stderr, "kosa8 disk create: need DELTA and --base or --size\n");
		return 2;
	}
	if (disk_create(path, base, &o, err, sizeof(err)) < 0) {
		fprintf(stderr, "kosa8 disk: %s\n", err);
		return 1;
	}
	return 0;
}

static int disk_info_cmd(const char *path)
{
	struct disk *d;
	char err[DISK_ERR_LEN];

	if (disk_open(&d, path, DISK_RDONLY, err, sizeof(err)) < 0) {
		fprintf(stderr, "kosa8 disk: %s\n", err);
		return 1;
	}
	printf("size: %" PRIu64 " bytes\nlayers: %u\n", disk_size(d), disk_layer_count(d));
	disk_close(d);
	return 0;
}

int cmd_disk(int argc, char **argv)
{
	char err[DISK_ERR_LEN];

	if (argc < 2)
		return cli_usage_error("disk", NULL);
	if (!strcmp(argv[1], "create"))
		return disk_create_cmd(argc - 1, argv + 1);
	if (argc != 3)
		return cli_usage_error("disk", argv[1]);
	if (!strcmp(argv[1], "info"))
		return disk_info_cmd(argv[2]);
	if (!strcmp(argv[1], "freeze")) {
		if (disk_freeze(argv[2], err, sizeof(err)) < 0) {
			fprintf(stderr, "kosa8 disk: %s\n", err);
			return 1;
		}
		return 0;
	}
	fprintf(stderr, "kosa8 disk: unknown subcommand '%s'\n", argv[1]);
	return cli_usage_error("disk", NULL);
}
