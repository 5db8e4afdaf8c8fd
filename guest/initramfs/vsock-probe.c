/* vsock-probe: a guest-side vsock client and server for kosa8's test
 * initramfs (k8.test=vsock), so that VM tests can drive the virtio-vsock
 * device both ways in a guest that boots in seconds, without the Debian
 * image and the agent.
 *
 *   vsock-probe connect PORT BYTES   connect to the host (CID 2) on PORT,
 *                                    send BYTES of a pattern, half-close,
 *                                    read the peer's reply to the end and
 *                                    check it is the same bytes
 *   vsock-probe serve PORT           accept one host connection on PORT,
 *                                    read until it half-closes, echo it all
 *
 * Prints one "k8: vsock_connect=ok BYTES" / "k8: vsock_serve=ok BYTES" line
 * on success (the tests match it), or "k8: vsock_...=fail WHY", exit 1. */
#include <errno.h>
#include <linux/vm_sockets.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK 65536

static uint8_t pattern_byte(uint64_t i) { return (uint8_t)(i * 2654435761u >> 13); }

static int fail(const char *what, const char *why)
{
	printf("k8: vsock_%s=fail %s: %s\n", what, why, strerror(errno));
	return 1;
}

static int vsock_addr(struct sockaddr_vm *a, unsigned cid, unsigned port)
{
	memset(a, 0, sizeof(*a));
	a->svm_family = AF_VSOCK;
	a->svm_cid = cid;
	a->svm_port = port;
	return socket(AF_VSOCK, SOCK_STREAM, 0);
}

/* Sends the whole pattern, then reads the echo: the host's peer reads all
 * before it answers (tests/vm/vsock-peer.py). */
static int do_connect(unsigned port, uint64_t total)
{
	static uint8_t buf[CHUNK];
	struct sockaddr_vm a;
	uint64_t sent = 0, got = 0;
	int fd = vsock_addr(&a, VMADDR_CID_HOST, port);

	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return fail("connect", "connect");
	while (sent < total) {
		size_t n = total - sent < CHUNK ? (size_t)(total - sent) : CHUNK;
		ssize_t w;
		for (size_t i = 0; i < n; i++)
			buf[i] = pattern_byte(sent + i);
		if ((w = write(fd, buf, n)) <= 0)
			return fail("connect", "write");
		sent += (uint64_t)w;
	}
	if (shutdown(fd, SHUT_WR) < 0)
		return fail("connect", "shutdown");
	for (;;) {
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r < 0)
			return fail("connect", "read");
		if (r == 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pattern_byte(got + (uint64_t)i)) {
				errno = EBADMSG;
				return fail("connect", "echo differs");
			}
		got += (uint64_t)r;
	}
	if (got != total) {
		errno = EPIPE;
		return fail("connect", "short echo");
	}
	printf("k8: vsock_connect=ok %llu\n", (unsigned long long)got);
	return 0;
}

/* Reads everything the host sends (up to MAX_ECHO), then echoes it: the
 * host's client can write all, then read, without a deadlock on credit. */
#define MAX_ECHO (16u << 20)

static int do_serve(unsigned port)
{
	struct sockaddr_vm a;
	size_t len = 0;
	uint8_t *buf = malloc(MAX_ECHO);
	int lfd = vsock_addr(&a, VMADDR_CID_ANY, port), fd;

	if (!buf || lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0)
		return fail("serve", "listen");
	printf("k8: vsock_listening=%u\n", port);
	if ((fd = accept(lfd, NULL, NULL)) < 0)
		return fail("serve", "accept");
	for (;;) {
		ssize_t r = read(fd, buf + len, MAX_ECHO - len);
		if (r < 0)
			return fail("serve", "read");
		if (r == 0)
			break;
		len += (size_t)r;
		if (len == MAX_ECHO) {
			errno = EFBIG;
			return fail("serve", "too much");
		}
	}
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, buf + off, len - off);
		if (w <= 0)
			return fail("serve", "write");
		off += (size_t)w;
	}
	close(fd);
	printf("k8: vsock_serve=ok %zu\n", len);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "connect"))
		return do_connect((unsigned)strtoul(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
	if (argc == 3 && !strcmp(argv[1], "serve"))
		return do_serve((unsigned)strtoul(argv[2], NULL, 10));
	fprintf(stderr, "usage: vsock-probe connect PORT BYTES | serve PORT\n");
	return 2;
}
