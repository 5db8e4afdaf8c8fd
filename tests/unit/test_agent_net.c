/* The agent's egress relay (src/agent/net.c), the real binary in
 * --egress-only mode: its "host" is unix sockets PREFIX_1053 / PREFIX_1080
 * served by this test, exactly as the VMM's vsock device maps guest
 * connections to CID 2 (docs/vsock.md).  netfilter is not involved here
 * (the VM tests do that with real curl); what is tested is the relay's own
 * logic: DNS id rewriting and answer routing over several streams, TCP DNS
 * relayed byte for byte with half-close, bulk data with back-pressure, and
 * hostile input from either side. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "end_child.h"

static char dir[64], prefix[128];
static int host_dns = -1, host_tcp = -1;   /* the fake host's listeners */
static uint16_t tcp_port, dns_port;
static pid_t agent_pid = -1;

/* ---- harness ---- */

static uint16_t free_port(int type)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(a);
	int fd = socket(AF_INET, type, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static int unix_listen(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 16), 0);
	return fd;
}

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	return a;
}

static int tcp_connect(uint16_t port)
{
	struct sockaddr_in a = loopback(port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* Accepts on a fake-host listener within ms; -1 on timeout. */
static int host_accept(int lfd, int ms)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	if (poll(&p, 1, ms) != 1)
		return -1;
	return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

static int wait_readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms);
}

static void read_exact(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		assert_int_equal(wait_readable(fd, 5000), 1);
		ssize_t n = read(fd, p, len);
		assert_true(n > 0);
		p += n;
		len -= (size_t)n;
	}
}

static void write_exact(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		assert_true(n > 0);
		p += n;
		len -= (size_t)n;
	}
}

/* A DNS query of n bytes: id, then a recognisable body. */
static size_t make_query(uint8_t *q, uint16_t id, uint8_t tag, size_t n)
{
	memset(q, tag, n);
	q[0] = (uint8_t)(id >> 8);
	q[1] = (uint8_t)id;
	q[2] = 0x01;   /* RD */
	return n;
}

/* Reads one framed message from a host-side stream into m; its length. */
static size_t host_read_frame(int fd, uint8_t *m, size_t cap)
{
	uint8_t l[2];
	read_exact(fd, l, 2);
	size_t n = (size_t)l[0] << 8 | l[1];
	assert_true(n <= cap);
	read_exact(fd, m, n);
	return n;
}

static void host_write_frame(int fd, const uint8_t *m, size_t n)
{
	uint8_t l[2] = { (uint8_t)(n >> 8), (uint8_t)n };
	write_exact(fd, l, 2);
	write_exact(fd, m, n);
}

static int udp_client(void)
{
	struct sockaddr_in a = loopback(0);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void udp_send(int fd, const uint8_t *q, size_t n)
{
	struct sockaddr_in a = loopback(dns_port);
	assert_int_equal(sendto(fd, q, n, 0, (struct sockaddr *)&a, sizeof(a)), (ssize_t)n);
}

static int setup(void **state)
{
	char bin[PATH_MAX + 32], exe[PATH_MAX], path[200], tcp[32], dns[32], log[128];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	assert_true(len > 0);
	exe[len] = 0;
	*strrchr(exe, '/') = 0;
	*strrchr(exe, '/') = 0;
	snprintf(bin, sizeof(bin), "%s/kosa8-agent", exe);
	strcpy(dir, "/tmp/k8net-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(prefix, sizeof(prefix), "%s/vsock", dir);
	snprintf(path, sizeof(path), "%s_1053", prefix);
	host_dns = unix_listen(path);
	snprintf(path, sizeof(path), "%s_1080", prefix);
	host_tcp = unix_listen(path);
	tcp_port = free_port(SOCK_STREAM);
	dns_port = free_port(SOCK_DGRAM);
	snprintf(tcp, sizeof(tcp), "127.0.0.1:%u", tcp_port);
	snprintf(dns, sizeof(dns), "127.0.0.1:%u", dns_port);
	snprintf(log, sizeof(log), "%s/agent.log", dir);
	agent_pid = fork();
	if (agent_pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 2);
		execl(bin, bin, "--egress-only", "--egress-upstream", prefix, "--egress-tcp", tcp,
		      "--egress-dns", dns, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {   /* up to 5 s for the listeners */
		struct sockaddr_in a = loopback(dns_port);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
		close(fd);
		if (rc == 0) {
			/* That probe is a TCP DNS relay: the agent opened a host
			 * stream for it; take it and drop it. */
			int h = host_accept(host_dns, 5000);
			if (h >= 0)
				close(h);
			return 0;
		}
		usleep(10000);
	}
	fail_msg("agent --egress-only did not start (%s)", bin);
	return -1;
}

static int teardown(void **state)
{
	char cmd[160];

	end_child(agent_pid, SIGKILL, false);
	close(host_dns);
	close(host_tcp);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void assert_agent_alive(void)
{
	assert_int_equal(waitpid(agent_pid, NULL, WNOHANG), 0);
}

/* ---- DNS over UDP ---- */

/* Five clients, all with query id 0x1234: each gets its own answer back
 * with its own id.  The agent spreads queries over its streams, so two of
 * them share one, and there the ids the host sees differ. */
#define NCLIENTS 5
static void test_dns_udp_routing(void **state)
{
	uint8_t q[64], m[600], a[600];
	int c[NCLIENTS], streams[NCLIENTS], ns = 0, got = 0;
	uint16_t ids[NCLIENTS][NCLIENTS];
	int nids[NCLIENTS] = { 0 };

	for (int i = 0; i < NCLIENTS; i++) {
		c[i] = udp_client();
		udp_send(c[i], q, make_query(q, 0x1234, (uint8_t)(0xa0 + i), (size_t)(30 + i)));
	}
	/* Serve each stream as it opens, answering in reverse order where a
	 * stream carries two. */
	while (got < NCLIENTS) {
		int h = host_accept(host_dns, 5000);
		uint8_t held[NCLIENTS][64];
		size_t hn[NCLIENTS];
		int nh = 0;
		assert_true(h >= 0);
		streams[ns] = h;
		while (got < NCLIENTS && wait_readable(h, 300) == 1) {
			size_t n = host_read_frame(h, m, sizeof(m));
			assert_true(n >= 30 && n < 30 + NCLIENTS);
			assert_int_equal(m[3], 0xa0 + (n - 30));
			for (int k = 0; k < nids[ns]; k++)
				assert_int_not_equal(ids[ns][k], m[0] << 8 | m[1]);
			ids[ns][nids[ns]++] = (uint16_t)(m[0] << 8 | m[1]);
			m[2] |= 0x80;   /* QR: an answer */
			memcpy(held[nh], m, n);
			hn[nh++] = n;
			got++;
		}
		while (nh--)
			host_write_frame(h, held[nh], hn[nh]);
		ns++;
	}
	assert_true(ns < NCLIENTS);   /* some stream carried two */
	for (int i = 0; i < NCLIENTS; i++) {
		assert_int_equal(wait_readable(c[i], 5000), 1);
		assert_int_equal(recv(c[i], a, sizeof(a), 0), 30 + i);
		assert_int_equal(a[0] << 8 | a[1], 0x1234);
		assert_int_equal(a[3], 0xa0 + i);
		close(c[i]);
	}
	for (int i = 0; i < ns; i++)
		close(streams[i]);
	/* Let the agent see those streams end before the next test's query
	 * (one sent on a stream the host just closed is lost, as UDP may be). */
	usleep(200 * 1000);
}

/* Garbage both ways: a datagram shorter than a DNS header is not sent on;
 * an answer with an id the agent never gave reaches nobody; an oversized
 * frame ends that stream, and the next query opens a new one. */
static void test_dns_udp_hostile(void **state)
{
	uint8_t q[64], m[600], junk[5000];
	int c = udp_client(), h, h2;
	size_t n;

	udp_send(c, (const uint8_t *)"tiny", 4);
	udp_send(c, q, make_query(q, 0x0101, 0xc3, 30));
	h = host_accept(host_dns, 5000);
	assert_true(h >= 0);
	n = host_read_frame(h, m, sizeof(m));
	assert_int_equal(n, 30);   /* the 4-byte one never came */
	assert_int_equal(m[3], 0xc3);
	m[0] ^= 0x55;               /* an id the agent did not give */
	host_write_frame(h, m, n);
	assert_int_equal(wait_readable(c, 500), 0);
	/* A frame over the agent's limit: the stream is dropped. */
	memset(junk, 0, sizeof(junk));
	junk[0] = 0xff;
	junk[1] = 0xff;
	write_exact(h, junk, 2 + 4500);
	assert_int_equal(wait_readable(h, 5000), 1);
	ssize_t r = read(h, m, sizeof(m));   /* the agent closed it (unread data: a reset) */
	assert_true(r == 0 || (r < 0 && errno == ECONNRESET));
	close(h);
	/* Still serving: a new query, a new stream, a real answer. */
	udp_send(c, q, make_query(q, 0x0202, 0xd4, 33));
	h2 = host_accept(host_dns, 5000);
	assert_true(h2 >= 0);
	n = host_read_frame(h2, m, sizeof(m));
	assert_int_equal(n, 33);
	host_write_frame(h2, m, n);
	assert_int_equal(wait_readable(c, 5000), 1);
	assert_int_equal(recv(c, m, sizeof(m), 0), 33);
	assert_int_equal(m[0] << 8 | m[1], 0x0202);
	close(h2);
	close(c);
	assert_agent_alive();
}

/* ---- TCP: DNS relay, direct connections ---- */

/* TCP DNS is relayed byte for byte (it is framed already), half-closes
 * both ways. */
static void test_dns_tcp_relay(void **state)
{
	static const uint8_t msg[] = { 0, 14, 0xbe, 0xef, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0 };
	uint8_t m[64];
	int c = tcp_connect(dns_port);
	int h = host_accept(host_dns, 5000);

	assert_true(h >= 0);
	write_exact(c, msg, sizeof(msg));
	read_exact(h, m, sizeof(msg));
	assert_memory_equal(m, msg, sizeof(msg));
	shutdown(c, SHUT_WR);
	assert_int_equal(wait_readable(h, 5000), 1);
	assert_int_equal(read(h, m, sizeof(m)), 0);   /* the guest's EOF reached the host */
	write_exact(h, "answer", 6);                   /* and the host can still answer */
	read_exact(c, m, 6);
	assert_memory_equal(m, "answer", 6);
	close(h);
	assert_int_equal(wait_readable(c, 5000), 1);
	assert_int_equal(read(c, m, sizeof(m)), 0);
	close(c);
}

struct bulk { int fd; size_t len; };

static void *bulk_writer(void *arg)
{
	struct bulk *b = arg;
	uint8_t buf[65536];
	size_t done = 0;
	while (done < b->len) {
		size_t n = b->len - done < sizeof(buf) ? b->len - done : sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)((done + i) * 7 + 3);
		write_exact(b->fd, buf, n);
		done += n;
	}
	shutdown(b->fd, SHUT_WR);
	return NULL;
}

/* 16 MiB through the relay while the host side reads slowly at first:
 * nothing lost, nothing reordered, and the agent buffers only its window
 * (the writer blocks instead). */
static void test_relay_bulk_backpressure(void **state)
{
	const size_t total = 16u << 20;
	struct bulk b = { .fd = tcp_connect(dns_port), .len = total };
	int h = host_accept(host_dns, 5000);
	uint8_t buf[65536];
	size_t got = 0;
	pthread_t t;

	assert_true(h >= 0);
	assert_int_equal(pthread_create(&t, NULL, bulk_writer, &b), 0);
	usleep(300 * 1000);   /* the writer fills the agent's buffer and stalls */
	while (got < total + 1) {
		assert_int_equal(wait_readable(h, 10000), 1);
		ssize_t n = read(h, buf, sizeof(buf));
		assert_true(n >= 0);
		if (n == 0)
			break;
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != (uint8_t)((got + (size_t)i) * 7 + 3))
				fail_msg("byte %zu differs", got + (size_t)i);
		got += (size_t)n;
	}
	assert_int_equal(got, total);
	pthread_join(t, NULL);
	close(h);
	close(b.fd);
}

/* A connection made straight to the transparent port (no netfilter
 * redirect, so its "original destination" is loopback) is closed, and
 * nothing is opened towards the host. */
static void test_tcp_direct_refused(void **state)
{
	uint8_t m[16];
	int c = tcp_connect(tcp_port);

	assert_int_equal(wait_readable(c, 5000), 1);
	ssize_t n = read(c, m, sizeof(m));
	assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
	assert_int_equal(host_accept(host_tcp, 300), -1);
	close(c);
	assert_agent_alive();
}

/* The host refusing (nothing listening on its port) ends the guest's
 * connection; the agent goes on. */
static void test_host_refuses(void **state)
{
	char path[200];
	uint8_t m[8];

	snprintf(path, sizeof(path), "%s_1053", prefix);
	close(host_dns);
	unlink(path);
	int c = tcp_connect(dns_port);
	assert_int_equal(wait_readable(c, 5000), 1);
	ssize_t n = read(c, m, sizeof(m));
	assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
	close(c);
	host_dns = unix_listen(path);
	assert_agent_alive();
}

/* The RLIMIT_NOFILE at which the agent has exactly `spare` descriptors
 * left: descriptors are handed out lowest first, so the limit is one past
 * its spare-th free number.  Read once the set holds still for 300 ms
 * (streams of earlier tests may still be closing). */
static rlim_t limit_leaving(int spare)
{
	char path[64], seen[1024], last[1024];
	int same = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)agent_pid);
	memset(last, 2, sizeof(last));
	while (same < 3) {
		DIR *d = opendir(path);
		struct dirent *e;
		assert_non_null(d);
		memset(seen, 0, sizeof(seen));
		while ((e = readdir(d)))
			if (e->d_name[0] != '.' && atoi(e->d_name) < (int)sizeof(seen))
				seen[atoi(e->d_name)] = 1;
		closedir(d);
		same = memcmp(seen, last, sizeof(seen)) ? 0 : same + 1;
		memcpy(last, seen, sizeof(seen));
		usleep(100 * 1000);
	}
	for (int fd = 0; fd < (int)sizeof(seen); fd++)
		if (!seen[fd] && --spare == 0)
			return (rlim_t)fd + 1;
	fail_msg("the agent holds too many descriptors");
	return 0;
}

#define FD_RELAYS 4
/* Out of descriptors (a guest opening connections until the agent's
 * RLIMIT_NOFILE is used up): the limit is set so that accept() itself
 * fails with EMFILE while a client waits in the listen queue.  That client
 * is refused, and once the others close, the agent serves new ones (it
 * used to retry accept() forever and never serve anything again). */
static void test_out_of_descriptors(void **state)
{
	struct rlimit old, lim;
	int c[FD_RELAYS], h[FD_RELAYS], extra, fresh, hf;
	uint8_t m[16];
	ssize_t n;

	assert_int_equal(prlimit(agent_pid, RLIMIT_NOFILE, NULL, &old), 0);
	lim = (struct rlimit){ .rlim_cur = limit_leaving(2 * FD_RELAYS), .rlim_max = old.rlim_max };
	assert_int_equal(prlimit(agent_pid, RLIMIT_NOFILE, &lim, NULL), 0);
	for (int i = 0; i < FD_RELAYS; i++) {   /* two of the agent's descriptors each */
		c[i] = tcp_connect(dns_port);
		h[i] = host_accept(host_dns, 5000);
		assert_true(h[i] >= 0);
	}
	extra = tcp_connect(dns_port);
	assert_int_equal(wait_readable(extra, 5000), 1);
	n = read(extra, m, sizeof(m));
	assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
	assert_int_equal(host_accept(host_dns, 300), -1);
	close(extra);
	for (int i = 0; i < FD_RELAYS; i++) {
		close(c[i]);
		close(h[i]);
	}
	fresh = tcp_connect(dns_port);
	hf = host_accept(host_dns, 5000);
	assert_true(hf >= 0);
	write_exact(fresh, "k8", 2);
	read_exact(hf, m, 2);
	assert_memory_equal(m, "k8", 2);
	close(fresh);
	close(hf);
	assert_int_equal(prlimit(agent_pid, RLIMIT_NOFILE, &old, NULL), 0);
	assert_agent_alive();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dns_udp_routing),
		cmocka_unit_test(test_dns_udp_hostile),
		cmocka_unit_test(test_dns_tcp_relay),
		cmocka_unit_test(test_relay_bulk_backpressure),
		cmocka_unit_test(test_tcp_direct_refused),
		cmocka_unit_test(test_host_refuses),
		cmocka_unit_test(test_out_of_descriptors),
	};
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown);
}
