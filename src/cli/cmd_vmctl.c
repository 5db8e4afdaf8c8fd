/* kosa8 vmctl: sends one command to a running VMM's control socket
 * (kosa8 vm --control PATH) and prints the answer.  The low-level tool
 * behind checkpoints; the sandbox commands come on top of it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/util.h"

static const char vmctl_usage[] =
	"usage: kosa8 vmctl SOCKET COMMAND [ARGS...]\n"
	"\n"
	"Sends COMMAND to the VMM listening on SOCKET (kosa8 vm --control) and\n"
	"prints its one-line answer.  Commands: pause, resume, status, stop,\n"
	"checkpoint DIR [NEWTOP].\n"
	"Exit status: 0 answer 'ok ...', 1 answer 'error ...' or no answer, 2 usage.\n";

static int vmctl_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* Reads the answer up to its newline (the VMM sends exactly one line). */
static int vmctl_read_line(int fd, char *buf, size_t len)
{
	size_t n = 0;

	while (n + 1 < len) {
		ssize_t r = read(fd, buf + n, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return n ? 0 : -EPIPE;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return 0;
}

int cmd_vmctl(int argc, char **argv)
{
	char line[4096], answer[1024];
	size_t n = 0;
	int fd, err;

	if (argc < 3 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(vmctl_usage, argc < 3 ? stderr : stdout);
		return argc < 3 ? 2 : 0;
	}
	for (int i = 2; i < argc; i++) {
		size_t l = strlen(argv[i]);
		if (strchr(argv[i], '\n') || n + l + 2 > sizeof(line)) {
			fprintf(stderr, "kosa8 vmctl: command too long or with a newline\n");
			return 2;
		}
		memcpy(line + n, argv[i], l);
		n += l;
		line[n++] = i + 1 < argc ? ' ' : '\n';
	}
	fd = vmctl_connect(argv[1]);
	if (fd < 0) {
		fprintf(stderr, "kosa8 vmctl: cannot connect to %s: %s\n", argv[1], strerror(-fd));
		return 1;
	}
	err = write_all(fd, line, n);
	if (!err)
		err = vmctl_read_line(fd, answer, sizeof(answer));
	close(fd);
	if (err) {
		fprintf(stderr, "kosa8 vmctl: no answer from %s: %s\n", argv[1], strerror(-err));
		return 1;
	}
	puts(answer);
	return strncmp(answer, "ok", 2) == 0 && (answer[2] == ' ' || !answer[2]) ? 0 : 1;
}
