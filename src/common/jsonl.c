#include "common/jsonl.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/fdpass.h"
#include "common/util.h"

int jsonl_parse(const char *line, size_t len, size_t max, cJSON **msg, const char **why)
{
	const cJSON *v;
	char *text;

	*msg = NULL;
	if (len > max) {
		*why = "the message is longer than the protocol allows";
		return -EPROTO;
	}
	if (memchr(line, '\0', len)) {
		*why = "the message holds a NUL byte";
		return -EPROTO;
	}
	if (!(text = malloc(len + 1)))
		return *why = "out of memory", -ENOMEM;
	memcpy(text, line, len);
	text[len] = '\0';
	*msg = cJSON_ParseWithOpts(text, NULL, 1);
	free(text);
	if (!cJSON_IsObject(*msg)) {
		cJSON_Delete(*msg);
		*msg = NULL;
		*why = "the message is not one JSON object";
		return -EPROTO;
	}
	v = cJSON_GetObjectItemCaseSensitive(*msg, "v");
	if (!cJSON_IsNumber(v) || v->valuedouble != JSONL_VERSION) {
		cJSON_Delete(*msg);
		*msg = NULL;
		*why = "the peer speaks another control protocol version (a kosa8 upgraded while "
		       "this sandbox ran? stop it with the old kosa8, or kill it, and start it again)";
		return -EPROTONOSUPPORT;
	}
	return 0;
}

int jsonl_send(int sock, const cJSON *msg, int pass_fd)
{
	cJSON *copy = cJSON_Duplicate(msg, 1);
	char *text = NULL;
	size_t len;
	int err = -ENOMEM;

	if (!cJSON_IsObject(copy)) {
		err = copy ? -EINVAL : -ENOMEM;
		goto out;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(copy, "v");
	if (!cJSON_AddNumberToObject(copy, "v", JSONL_VERSION) ||
	    !(text = cJSON_PrintUnformatted(copy)))
		goto out;
	len = strlen(text);
	text[len] = '\n'; /* replaces the NUL: the line goes without it */
	err = fdpass_send(sock, text, len + 1, pass_fd);
out:
	free(text);
	cJSON_Delete(copy);
	return err;
}

/* Milliseconds left until deadline (mono_ms), 0 when past. */
static int left_ms(uint64_t deadline)
{
	uint64_t now = mono_ms();

	return now >= deadline ? 0 : (int)(deadline - now);
}

/* Bytes queued on sock to read now (at least 1: a closed peer's 0 still
 * needs a byte of room to be seen). */
static size_t queued(int sock)
{
	int n = 0;

	return ioctl(sock, FIONREAD, &n) == 0 && n > 0 ? (size_t)n : 1;
}

/* Reads until a newline into *buf, grown to what has come (never past cap
 * bytes): a bound far above the message costs nothing.  *len gets the
 * line's length without the newline. */
static int read_line(int sock, char **buf, size_t cap, size_t *len, int timeout_ms, int *fd_out,
		     const char **why)
{
	uint64_t deadline = mono_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
	size_t got = 0, size = 0;
	char *nl;

	for (;;) {
		struct pollfd p = {.fd = sock, .events = POLLIN};
		int r = poll(&p, 1, left_ms(deadline));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return *why = "no answer in time", r < 0 ? -errno : -ETIMEDOUT;
		size_t want = queued(sock);
		if (want > cap - got)
			want = cap - got;
		if (got + want > size) {
			/* At least doubled: a peer sending a byte at a time
			 * costs log(max) copies, not one per byte. */
			size_t to = got + want > size * 2 || size * 2 > cap ? got + want : size * 2;
			char *nb = realloc(*buf, to);
			if (!nb)
				return *why = "out of memory", -ENOMEM;
			*buf = nb;
			size = to;
		}
		/* Up to the newline only: a stream may carry more lines (a long
		 * operation's progress before its reply), which stay in the socket
		 * for the next call. */
		ssize_t pk = recv(sock, *buf + got, want, MSG_PEEK | MSG_DONTWAIT);
		if (pk > 0 && (nl = memchr(*buf + got, '\n', (size_t)pk)))
			want = (size_t)(nl - (*buf + got)) + 1;
		ssize_t n = fdpass_recv(sock, *buf + got, want, fd_out);
		if (n == -EPROTO)
			return *why = "a descriptor came that was not asked for, or more than one", -EPROTO;
		if (n < 0)
			return *why = "the connection failed", (int)n;
		if (n == 0)
			return *why = "the peer closed the connection before a whole message",
			       -ECONNRESET;
		if ((nl = memchr(*buf + got, '\n', (size_t)n))) {
			*len = (size_t)(nl - *buf);
			if (*len + 1 != got + (size_t)n)
				return *why = "bytes came after the message", -EPROTO;
			return 0;
		}
		got += (size_t)n;
		if (got == cap)
			return *why = "the message is longer than the protocol allows", -EPROTO;
	}
}

int jsonl_recv(int sock, size_t max, int timeout_ms, cJSON **msg, int *fd_out, const char **why)
{
	char *buf = NULL;
	size_t len = 0;
	int err;

	*msg = NULL;
	if (fd_out)
		*fd_out = -1;
	/* max + 1: room for the newline of a line of exactly max bytes. */
	err = read_line(sock, &buf, max < SIZE_MAX ? max + 1 : max, &len, timeout_ms, fd_out, why);
	if (!err)
		err = jsonl_parse(buf, len, max, msg, why);
	free(buf);
	if (err && fd_out && *fd_out >= 0) {
		close(*fd_out);
		*fd_out = -1;
	}
	return err;
}
