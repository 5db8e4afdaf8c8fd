/* What every command shares: its one error line, rm -rf of a state
 * directory, and the stdio of a supervisor it forks.  Apart from the
 * commands so that none calls another for it. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/termsafe.h"
#include "supervisor/supervisor.h"

int cli_fail(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	char *msg = NULL;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "kosa8 %s: ", cmd);
	if (n < 0)
		fputs("(out of memory for the message)", stderr);
	else
		term_write(stderr, msg, (size_t)n, TERM_KEEP_LINES | TERM_FINAL);
	fputc('\n', stderr);
	free(msg);
	return 1;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 ? -1 : 0;
}

int cli_remove_tree(const char *dir)
{
	return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) < 0 ? -errno : 0;
}

void cli_child_stdio_to_log(const char *dir)
{
	char log[PATH_MAX + 32];
	int out, null = open("/dev/null", O_RDONLY);

	snprintf(log, sizeof(log), "%s/" SUPERVISOR_LOG_FILE, dir);
	out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
	dup2(null, 0);
	if (out >= 0) {
		dup2(out, 1);
		dup2(out, 2);
	}
}
