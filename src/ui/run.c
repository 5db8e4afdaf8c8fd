#include "ui/run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

extern char **environ;

void ui_tail_add(struct ui_tail *t, const char *p, size_t n)
{
	if (n >= t->cap) {
		p += n - t->cap;
		n = t->cap;
		t->len = 0;
		t->cut = true;
	} else if (t->len + n > t->cap) {
		size_t drop = t->len + n - t->cap;
		memmove(t->buf, t->buf + drop, t->len - drop);
		t->len -= drop;
		t->cut = true;
	}
	memcpy(t->buf + t->len, p, n);
	t->len += n;
}

/* kosa8 itself: the console runs in kosa8-tools (src/cli/tools.c), which
 * names the kosa8 that started it. */
static const char *kosa8_cli(void)
{
	const char *exe = getenv(KOSA8_CLI_ENV);

	return exe && exe[0] == '/' ? exe : "/proc/self/exe";
}

int ui_spawn_self(char *const argv[], bool err_too, pid_t *pid, int *fd)
{
	posix_spawn_file_actions_t fa;
	int p[2], rc;

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	if (err_too)
		posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	rc = posix_spawn(pid, kosa8_cli(), &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc) {
		close(p[0]);
		return -rc;
	}
	*fd = p[0];
	return 0;
}

int ui_run_self(char *const argv[], struct ui_tail *t, bool err_too, int timeout_s)
{
	struct timespec start, now;
	char buf[16384];
	int fd, st, rc;
	pid_t pid;

	t->buf[t->len] = '\0';
	if ((rc = ui_spawn_self(argv, err_too, &pid, &fd)))
		return rc;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t n;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > timeout_s) {
			kill(pid, SIGKILL);
			rc = -ETIMEDOUT;
			break;
		}
		if (poll(&pf, 1, 1000) == 0)
			continue;
		if ((n = read(fd, buf, sizeof(buf))) <= 0)
			break;
		ui_tail_add(t, buf, (size_t)n);
	}
	close(fd);
	t->buf[t->len] = '\0';
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (rc)
		return rc;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -EINTR;
}
