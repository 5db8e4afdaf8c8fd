/* The guest agent's reading of the host's DNS stream (src/agent/net.c):
 * length-framed answers, matched by id to the queries in flight and sent
 * back to their clients.  The host is meant to be kosa8's supervisor, but
 * the agent must not trust the bytes: any input is framed, matched or
 * dropped, never read or written out of bounds, and the slot accounting
 * stays exact.
 *
 * The input is the stream as the host would send it.  The first byte picks
 * which of the stream's slots hold a query (so that some ids match). */
#include "agent/net.c"

#include <stdint.h>
#include <stdlib.h>

uint64_t boottime_ms(void)
{
	return 1000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int udp_fd = -1;
static struct sockaddr_in client;

static void init_once(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(client);

	if (udp_fd >= 0)
		return;
	/* Answers go to a socket of our own (never read: it just fills, and
	 * the agent's MSG_DONTWAIT send drops what does not fit). */
	int c = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (c < 0 || bind(c, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(c, (struct sockaddr *)&client, &sl) < 0)
		abort();
	udp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (udp_fd < 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct loop l;
	struct dns_stream *s = &l.dns[0];
	int sp[2], rc;

	if (size < 1 || size > 60000)
		return 0;
	init_once();
	memset(&l, 0, sizeof(l));
	l.ep = epoll_create1(EPOLL_CLOEXEC);
	l.dns_udp.fd = udp_fd;
	if (l.ep < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		abort();
	s->ev = (struct ev){ .kind = EV_DNS_STREAM, .fd = sp[0], .owner = s };
	/* Slots in flight: every slot whose index shares a bit with data[0];
	 * their ids are what the agent would have given (gen 1). */
	for (int i = 0; i < DNS_SLOTS; i++) {
		if (!(i & data[0]))
			continue;
		s->slot[i] = (struct dns_slot){ .used = true, .id = (uint16_t)(1 << 8 | i),
						.orig_id = (uint16_t)(i * 257), .from = client };
		s->pending++;
	}
	if (write(sp[1], data + 1, size - 1) != (ssize_t)(size - 1))
		abort();
	close(sp[1]);
	do
		rc = dns_stream_read(&l, s);
	while (rc == 0);
	unsigned used = 0;
	for (int i = 0; i < DNS_SLOTS; i++)
		used += s->slot[i].used;
	if (used != s->pending || s->in_len > sizeof(s->in))
		abort();
	close(sp[0]);
	close(l.ep);
	return 0;
}
