/* tests/arm64/ctl SOCKET JSON: one request on a kosa8 VMM's control socket
 * (docs/control-protocol.md), its reply line on stdout.  The arm64 helper
 * has only busybox, whose nc knows no Unix sockets; the kosa8 CLI is not
 * cross-built.  Exits 0 when the reply says "ok":true. */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char buf[65536];
	size_t n = 0;
	int fd;

	if (argc != 3 || strlen(argv[1]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "usage: ctl SOCKET JSON\n");
		return 2;
	}
	memcpy(sa.sun_path, argv[1], strlen(argv[1]));
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("ctl: connect");
		return 1;
	}
	if (write(fd, argv[2], strlen(argv[2])) < 0 || write(fd, "\n", 1) != 1) {
		perror("ctl: write");
		return 1;
	}
	while (n < sizeof(buf) - 1) {
		ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		if (memchr(buf, '\n', n))
			break;
	}
	buf[n] = '\0';
	fputs(buf, stdout);
	return strstr(buf, "\"ok\":true") ? 0 : 1;
}
