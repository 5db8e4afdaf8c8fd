/* Agent protocol codec: headers, TLV requests, entries, path and symlink
 * checks, CRC-32, and the tree writer fed hostile frames directly (the same
 * code guards the agent's put and the host's get); the fix-up request; and
 * the host's deadlines against an agent that stops answering or reading. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "agentproto/client.h"
#include "agentproto/conn.h"
#include "agentproto/proto.h"
#include "agentproto/tree.h"
#include "sandbox/sandbox.h"
#include "tmp_dir.h"

static void test_hdr(void **state)
{
	uint8_t b[AP_HDR_SIZE];
	struct ap_hdr h;
	ap_hdr_encode(b, AP_EXEC, 7, 100);
	assert_int_equal(ap_hdr_decode(b, &h), 0);
	assert_int_equal(h.type, AP_EXEC);
	assert_int_equal(h.chan, 7);
	assert_int_equal(h.len, 100);
	ap_hdr_encode(b, AP_EXEC, 7, AP_MAX_PAYLOAD + 1);
	assert_int_equal(ap_hdr_decode(b, &h), -EBADMSG);
	ap_hdr_encode(b, 0, 7, 1);
	assert_int_equal(ap_hdr_decode(b, &h), -EBADMSG);
	ap_hdr_encode(b, AP_TYPE_MAX + 1, 7, 1);
	assert_int_equal(ap_hdr_decode(b, &h), -EBADMSG);
	ap_hdr_encode(b, AP_PING, 7, 0);
	b[6] = 1;   /* flags */
	assert_int_equal(ap_hdr_decode(b, &h), -EBADMSG);
}

static void test_exec_req(void **state)
{
	struct ap_wr w;
	struct ap_exec_req q;
	uint8_t pty[4] = { 30, 0, 100, 0 };
	ap_wr_init(&w);
	ap_put_tlv_str(&w, AP_T_ARG, "ls");
	ap_put_tlv_str(&w, AP_T_ARG, "-l");
	ap_put_tlv_str(&w, AP_T_ENV, "A=1");
	ap_put_tlv_str(&w, AP_T_CWD, "/tmp");
	ap_put_tlv(&w, AP_T_PTY, pty, 4);
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), 0);
	assert_int_equal(q.argc, 2);
	assert_string_equal(q.argv[1], "-l");
	assert_null(q.argv[2]);
	assert_string_equal(q.env[0], "A=1");
	assert_string_equal(q.cwd, "/tmp");
	assert_true(q.pty);
	assert_int_equal(q.rows, 30);
	assert_int_equal(q.cols, 100);
	ap_exec_req_free(&q);
	/* Every truncation of a valid request is refused or decodes cleanly. */
	for (size_t n = 0; n < w.len; n++) {
		int rc = ap_exec_req_decode(w.p, n, &q);
		if (rc == 0)
			ap_exec_req_free(&q);
		else
			assert_int_equal(rc, -EBADMSG);
	}
	ap_wr_free(&w);

	ap_wr_init(&w);   /* no argv */
	ap_put_tlv_str(&w, AP_T_CWD, "/");
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), -EBADMSG);
	ap_wr_free(&w);
	ap_wr_init(&w);   /* embedded NUL */
	ap_put_tlv(&w, AP_T_ARG, "a\0b", 3);
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), -EBADMSG);
	ap_wr_free(&w);
	ap_wr_init(&w);   /* env without '=' */
	ap_put_tlv_str(&w, AP_T_ARG, "x");
	ap_put_tlv_str(&w, AP_T_ENV, "NOEQUALS");
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), -EBADMSG);
	ap_wr_free(&w);
	ap_wr_init(&w);   /* cwd twice */
	ap_put_tlv_str(&w, AP_T_ARG, "x");
	ap_put_tlv_str(&w, AP_T_CWD, "/");
	ap_put_tlv_str(&w, AP_T_CWD, "/");
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), -EBADMSG);
	ap_wr_free(&w);
	ap_wr_init(&w);   /* TLV length beyond the payload */
	ap_put_u16(&w, AP_T_ARG);
	ap_put_u32(&w, 0xffffffffu);
	ap_put_bytes(&w, "abc", 3);
	assert_int_equal(ap_exec_req_decode(w.p, w.len, &q), -EBADMSG);
	ap_wr_free(&w);
}

static void test_paths(void **state)
{
	const char *good[] = { "a", "a/b", "a.b/..c/...", ".hidden" };
	const char *bad[] = { "", "/a", "a/", "a//b", ".", "..", "a/../b", "a/./b", "../x", "x/.." };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_int_equal(ap_path_check(good[i], strlen(good[i])), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(ap_path_check(bad[i], strlen(bad[i])), -EBADMSG);
	assert_int_equal(ap_path_check("a\0b", 3), -EBADMSG);

	assert_true(gw_target_inside("l", "x"));
	assert_true(gw_target_inside("d/l", "../x"));
	assert_false(gw_target_inside("d/l", "../../x"));
	assert_false(gw_target_inside("l", "../x"));
	assert_false(gw_target_inside("l", "/etc/passwd"));
	assert_false(gw_target_inside("l", "a/../../x"));
	assert_true(gw_target_inside("l", "./a/./b"));
	assert_false(gw_target_inside("l", ""));
}

static void test_crc_and_exit(void **state)
{
	assert_int_equal(ap_crc32(0, "123456789", 9), 0xcbf43926u);
	assert_int_equal(ap_crc32(ap_crc32(0, "1234", 4), "56789", 5), 0xcbf43926u);
	struct ap_exit x;
	uint8_t ok[8] = { AP_EXITED, 0, 0, 0, 42, 0, 0, 0 };
	assert_int_equal(ap_exit_decode(ok, 8, &x), 0);
	assert_int_equal(x.code, 42);
	uint8_t sig[8] = { AP_KILLED, 1, 0, 0, 11, 0, 0, 0 };
	assert_int_equal(ap_exit_decode(sig, 8, &x), 0);
	assert_int_equal(x.kind, AP_KILLED);
	assert_int_equal(x.core, 1);
	uint8_t badsig[8] = { AP_KILLED, 0, 0, 0, 0, 0, 0, 0 };
	assert_int_equal(ap_exit_decode(badsig, 8, &x), -EBADMSG);
	uint8_t badcode[8] = { AP_EXITED, 0, 0, 0, 0, 1, 0, 0 };
	assert_int_equal(ap_exit_decode(badcode, 8, &x), -EBADMSG);
	assert_int_equal(ap_exit_decode(ok, 7, &x), -EBADMSG);
}

/* ---- tree writer against crafted streams ---- */


static int feed(struct ap_tree_writer *w, uint16_t type, const void *p, size_t len)
{
	struct ap_frame f = { .h = { .len = (uint32_t)len, .type = type, .chan = 1 }, .p = p };
	return ap_tw_frame(w, &f);
}

static int entry(struct ap_tree_writer *w, uint8_t kind, uint32_t mode, uint64_t size,
		 const char *path, const char *target)
{
	struct ap_entry e = { .kind = kind, .mode = mode, .size = size, .path = path,
			      .path_len = (uint16_t)strlen(path), .target = target ? target : "",
			      .target_len = target ? (uint16_t)strlen(target) : 0 };
	struct ap_wr wr;
	ap_wr_init(&wr);
	ap_entry_encode(&wr, &e);
	int rc = feed(w, AP_ENTRY, wr.p, wr.len);
	ap_wr_free(&wr);
	return rc;
}

static int file_end(struct ap_tree_writer *w, uint64_t len, uint32_t crc)
{
	uint8_t b[12];
	struct ap_wr wr = { .p = b, .cap = sizeof(b) };
	ap_put_u64(&wr, len);
	ap_put_u32(&wr, crc);
	return feed(w, AP_FILE_END, b, sizeof(b));
}

static int tree_end(struct ap_tree_writer *w, uint32_t entries, uint64_t bytes)
{
	uint8_t end[12];
	struct ap_wr wr = { .p = end, .cap = sizeof(end) };
	ap_put_u32(&wr, entries);
	ap_put_u64(&wr, bytes);
	return feed(w, AP_TREE_END, end, sizeof(end));
}

static void open_root(struct ap_tree_writer *w, const char *sub)
{
	char p[128];
	snprintf(p, sizeof(p), "%s/%s", tmp, sub);
	assert_int_equal(ap_tw_open(w, p, NULL), 0);
}

static void test_writer_good(void **state)
{
	struct ap_tree_writer w;
	struct stat sb;
	char p[160], buf[16];
	open_root(&w, "good");
	assert_int_equal(entry(&w, AP_E_DIR, 0750, 0, "d", NULL), 0);
	assert_int_equal(entry(&w, AP_E_FILE, 0640, 5, "d/f", NULL), 0);
	assert_int_equal(feed(&w, AP_DATA, "hel", 3), 0);
	assert_int_equal(feed(&w, AP_DATA, "lo", 2), 0);
	assert_int_equal(file_end(&w, 5, ap_crc32(0, "hello", 5)), 0);
	assert_int_equal(entry(&w, AP_E_SYMLINK, 0777, 0, "d/l", "f"), 0);
	assert_int_equal(tree_end(&w, 3, 5), 1);
	ap_tw_close(&w);
	snprintf(p, sizeof(p), "%s/good/d/f", tmp);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0640);
	snprintf(p, sizeof(p), "%s/good/d/l", tmp);
	assert_int_equal(readlink(p, buf, sizeof(buf)), 1);
	snprintf(p, sizeof(p), "%s/good/d", tmp);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0750);
}

static void test_writer_refuses(void **state)
{
	struct ap_tree_writer w;
	char p[160];
	struct stat sb;

	open_root(&w, "bad1");
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 1, "../escape", NULL), -EBADMSG);
	ap_tw_close(&w);
	open_root(&w, "bad2");
	assert_int_equal(entry(&w, AP_E_SYMLINK, 0777, 0, "l", "/etc"), -EXDEV);
	assert_int_equal(entry(&w, AP_E_SYMLINK, 0777, 0, "l", "../.."), -EXDEV);
	ap_tw_close(&w);
	/* A symlink already in the target must not be followed. */
	snprintf(p, sizeof(p), "%s/bad3", tmp);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/bad3/out", tmp);
	assert_int_equal(symlink(tmp, p), 0);
	open_root(&w, "bad3");
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 1, "out/escape", NULL), -ELOOP);
	assert_int_equal(entry(&w, AP_E_DIR, 0755, 0, "out", NULL), -ENOTDIR);
	ap_tw_close(&w);
	snprintf(p, sizeof(p), "%s/escape", tmp);
	assert_int_equal(lstat(p, &sb), -1);
	/* Lengths and checksums. */
	open_root(&w, "bad4");
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 2, "f", NULL), 0);
	assert_int_equal(feed(&w, AP_DATA, "abc", 3), -EBADMSG);
	ap_tw_close(&w);
	open_root(&w, "bad5");
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 3, "f", NULL), 0);
	assert_int_equal(feed(&w, AP_DATA, "abc", 3), 0);
	assert_int_equal(file_end(&w, 3, 12345), -EIO);
	ap_tw_close(&w);
	open_root(&w, "bad6");
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 3, "f", NULL), 0);
	assert_int_equal(feed(&w, AP_DATA, "ab", 2), 0);
	assert_int_equal(file_end(&w, 3, ap_crc32(0, "ab", 2)), -EIO);
	ap_tw_close(&w);
	open_root(&w, "bad7");   /* setuid-free modes only within 07777 */
	assert_int_equal(entry(&w, AP_E_FILE, 0100644, 0, "f", NULL), -EBADMSG);
	assert_int_equal(feed(&w, AP_DATA, "x", 1), -EBADMSG);
	ap_tw_close(&w);
}

static struct ap_fixup_req fixup_example(void)
{
	struct ap_fixup_req q = {.seed_len = 64, .time_ns = 1796588045123456789ull, .identity = true};

	for (size_t i = 0; i < sizeof(q.seed); i++)
		q.seed[i] = (uint8_t)(i * 7);
	memcpy(q.machine_id, "0123456789abcdef", 16);
	snprintf(q.hostname, sizeof(q.hostname), "fork-1.dev");
	return q;
}

/* Encodes q, with extra raw bytes appended, and decodes it back. */
static int fixup_roundtrip(const struct ap_fixup_req *q, const void *extra, size_t n,
			   struct ap_fixup_req *out)
{
	struct ap_wr w;
	int rc;

	ap_wr_init(&w);
	ap_fixup_req_encode(&w, q);
	ap_put_bytes(&w, extra, n);
	assert_int_equal(ap_wr_status(&w), 0);
	rc = ap_fixup_req_decode(w.p, w.len, out);
	ap_wr_free(&w);
	return rc;
}

static void test_fixup_req(void **state)
{
	struct ap_fixup_req q = fixup_example(), d;
	const uint8_t dup_time[] = {AP_T_TIME, 0, 8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
	const uint8_t short_tlv[] = {AP_T_SEED, 0, 200, 0, 0, 0, 1};

	assert_int_equal(fixup_roundtrip(&q, NULL, 0, &d), 0);
	assert_true(d.identity);
	assert_int_equal(d.seed_len, 64);
	assert_memory_equal(d.seed, q.seed, 64);
	assert_true(d.time_ns == q.time_ns);
	assert_string_equal(d.hostname, "fork-1.dev");
	assert_memory_equal(d.machine_id, q.machine_id, 16);
	/* A rewind: no identity. */
	q.identity = false;
	assert_int_equal(fixup_roundtrip(&q, NULL, 0, &d), 0);
	assert_false(d.identity);
	assert_string_equal(d.hostname, "");
	/* Refused: a field twice, a truncated field, seeds out of bounds, a
	 * host name a shell or a resolver would take apart, no time. */
	assert_int_equal(fixup_roundtrip(&q, dup_time, sizeof(dup_time), &d), -EBADMSG);
	assert_int_equal(fixup_roundtrip(&q, short_tlv, sizeof(short_tlv), &d), -EBADMSG);
	q.seed_len = AP_FIXUP_SEED_MIN - 1;
	assert_int_equal(fixup_roundtrip(&q, NULL, 0, &d), -EBADMSG);
	q.seed_len = AP_FIXUP_SEED_MAX;
	assert_int_equal(fixup_roundtrip(&q, NULL, 0, &d), 0);
	q = fixup_example();
	snprintf(q.hostname, sizeof(q.hostname), "a;reboot");
	assert_int_equal(fixup_roundtrip(&q, NULL, 0, &d), -EBADMSG);
	memset(q.hostname, 'a', AP_HOSTNAME_MAX);
	q.hostname[AP_HOSTNAME_MAX] = 0;
	assert_int_equal(fixup_roundtrip(&q, NULL, 0, &d), 0);
	assert_false(ap_hostname_valid(q.hostname, AP_HOSTNAME_MAX + 1));
	/* A fork's host name is its sandbox name, which may hold '_': taken
	 * as it is, the agent refuses the whole fix-up (no reseed either). */
	assert_true(sandbox_name_valid("fork_1.dev"));
	snprintf(q.hostname, sizeof(q.hostname), "fork_1.dev");
	assert_int_equal(fixup_roundtrip(&q, NULL, 0, &d), -EBADMSG);
	ap_hostname_from("fork_1.dev", q.hostname);
	assert_string_equal(q.hostname, "fork-1.dev");
	assert_int_equal(fixup_roundtrip(&q, NULL, 0, &d), 0);
	assert_string_equal(d.hostname, "fork-1.dev");
	/* A host name without a machine-id (or the reverse) is half an identity. */
	struct ap_wr w;
	ap_wr_init(&w);
	ap_put_tlv(&w, AP_T_SEED, q.seed, 64);
	ap_put_tlv(&w, AP_T_TIME, "12345678", 8);
	ap_put_tlv_str(&w, AP_T_HOSTNAME, "x");
	assert_int_equal(ap_fixup_req_decode(w.p, w.len, &d), -EBADMSG);
	ap_wr_free(&w);
	ap_wr_init(&w);
	ap_put_tlv(&w, AP_T_SEED, q.seed, 64);
	assert_int_equal(ap_fixup_req_decode(w.p, w.len, &d), -EBADMSG);
	ap_wr_free(&w);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A guest whose agent says hello and then nothing (stopped, or stuck in a
 * request): every call has a deadline and says so. */
static void test_client_deadline(void **state)
{
	struct ap_fixup_req q = fixup_example();
	struct agent_client *c = NULL;
	struct agent_ping ping;
	struct ap_conn *peer;
	struct ap_frame f;
	uint32_t done;
	uint64_t t0;
	int sv[2];

	alarm(20); /* a call without a deadline hangs: this ends the test */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(ap_conn_open(&peer, sv[1]), 0);
	/* The agent's hello is there before the client asks. */
	assert_int_equal(ap_conn_send(peer, AP_HELLO, 0, "\1\0\0\0agent", 9), 0);
	assert_int_equal(ap_conn_flush(peer), 0);
	assert_int_equal(agent_client_from_fd(sv[0], &c), 0);
	assert_int_equal(ap_conn_recv(peer, &f, 1000), 0);
	assert_int_equal(f.h.type, AP_HELLO);
	agent_client_set_timeout(c, 300);
	t0 = now_ms();
	assert_int_equal(agent_fixup(c, &q, &done), -ETIMEDOUT);
	assert_true(now_ms() - t0 >= 300 && now_ms() - t0 < 5000);
	assert_non_null(strstr(agent_client_error(c), "did not answer within 300 ms"));
	assert_int_equal(ap_conn_recv(peer, &f, 1000), 0);
	assert_int_equal(f.h.type, AP_FIXUP);
	t0 = now_ms();
	assert_int_equal(agent_ping(c, &ping), -ETIMEDOUT);
	assert_true(now_ms() - t0 < 5000);
	agent_client_close(c);
	ap_conn_close(peer);
	alarm(0);
}

/* A peer that reads nothing: a send gives up after stall_ms. */
static void test_flush_stall(void **state)
{
	static uint8_t big[AP_MAX_PAYLOAD];
	struct ap_conn *c;
	uint64_t t0;
	int sv[2];

	alarm(20);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(ap_conn_open(&c, sv[0]), 0);
	assert_int_equal(c->stall_ms, AP_STALL_MS);
	c->stall_ms = 200;
	for (int i = 0; i < 64; i++)
		assert_int_equal(ap_conn_send(c, AP_STDOUT, 1, big, sizeof(big)), 0);
	t0 = now_ms();
	assert_int_equal(ap_conn_flush_all(c), -ETIMEDOUT);
	assert_true(now_ms() - t0 >= 200 && now_ms() - t0 < 5000);
	ap_conn_close(c);
	close(sv[1]);
	alarm(0);
}

/* Issue 23's stream, as the unmodified agent sends a guest's trust store:
 * a chain of links, each lexically inside, that leads to a host file; and
 * a file written through the chain.  The link that climbs through another
 * is refused as it comes, nothing is written through p, and the host file
 * stays as it was. */
static void test_writer_link_chain(void **state)
{
	struct ap_tree_writer w;
	char p[160], buf[32] = "";
	snprintf(p, sizeof(p), "%s/marker", tmp);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_int_equal(write(fd, "host\n", 5), 5);
	close(fd);
	open_root(&w, "chain");
	const char *dirs[] = {"d1", "d1/d2", "d1/d2/d3", "d1/d2/d3/d4", "d1/d2/d3/d4/d5", "d1/d2/d3/d4/d5/d6"};
	for (int i = 0; i < 6; i++)
		assert_int_equal(entry(&w, AP_E_DIR, 0755, 0, dirs[i], NULL), 0);
	assert_int_equal(entry(&w, AP_E_SYMLINK, 0777, 0, "d1/d2/d3/d4/d5/d6/p", "../../../../../.."), 0);
	assert_int_equal(entry(&w, AP_E_FILE, 0644, 4, "d1/d2/d3/d4/d5/d6/p/escape", NULL), -ELOOP);
	ap_tw_close(&w);
	open_root(&w, "chain2");
	for (int i = 0; i < 6; i++)
		assert_int_equal(entry(&w, AP_E_DIR, 0755, 0, dirs[i], NULL), 0);
	assert_int_equal(entry(&w, AP_E_SYMLINK, 0777, 0, "d1/d2/d3/d4/d5/d6/p", "../../../../../.."), 0);
	assert_int_equal(entry(&w, AP_E_SYMLINK, 0777, 0, "ca-certificates.crt",
			       "d1/d2/d3/d4/d5/d6/p/../marker"), -EXDEV);
	assert_non_null(strstr(w.err, "ca-certificates.crt: symlink target"));
	ap_tw_close(&w);
	struct stat sb;
	snprintf(p, sizeof(p), "%s/chain2/ca-certificates.crt", tmp);
	assert_int_equal(lstat(p, &sb), -1);
	snprintf(p, sizeof(p), "%s/marker", tmp);
	fd = open(p, O_RDONLY);
	assert_int_equal(read(fd, buf, sizeof(buf)), 5);
	assert_int_equal(fstat(fd, &sb), 0);
	close(fd);
	assert_string_equal(buf, "host\n");
	assert_int_equal(sb.st_mode & 07777, 0600);
}

/* Kinds a sender never sends are refused by name; setuid, setgid and
 * sticky bits are dropped and counted. */
static void test_writer_kinds_and_modes(void **state)
{
	static const struct { uint8_t kind; const char *target, *says; } refused[] = {
		{ AP_E_HARDLINK, "f", "a hard link to f" }, { AP_E_FIFO, NULL, "a FIFO" },
		{ AP_E_DEVICE, NULL, "a device node" }, { AP_E_SOCKET, NULL, "a socket" },
	};
	struct ap_tree_writer w;
	struct stat sb;
	char p[160];
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		open_root(&w, "kinds");
		assert_int_equal(entry(&w, refused[i].kind, 0644, 0, "x", refused[i].target), -EPERM);
		assert_non_null(strstr(w.err, refused[i].says));
		ap_tw_close(&w);
		snprintf(p, sizeof(p), "%s/kinds/x", tmp);
		assert_int_equal(lstat(p, &sb), -1);
	}
	open_root(&w, "kinds");
	uint8_t junk[32] = { 8 };
	assert_int_equal(feed(&w, AP_ENTRY, junk, sizeof(junk)), -EBADMSG);
	assert_non_null(strstr(w.err, "unknown kind 8"));
	ap_tw_close(&w);
	open_root(&w, "modes");
	assert_int_equal(entry(&w, AP_E_FILE, 06777, 1, "suid", NULL), 0);
	assert_int_equal(feed(&w, AP_DATA, "x", 1), 0);
	assert_int_equal(file_end(&w, 1, ap_crc32(0, "x", 1)), 0);
	assert_int_equal(entry(&w, AP_E_DIR, 01777, 0, "tmp", NULL), 0);
	assert_int_equal(tree_end(&w, 2, 1), 1);
	ap_tw_close(&w);
	assert_int_equal(w.st.special_dropped, 2);
	snprintf(p, sizeof(p), "%s/modes/suid", tmp);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 07000, 0);
	snprintf(p, sizeof(p), "%s/modes/tmp", tmp);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(sb.st_mode & 07000, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hdr),
		cmocka_unit_test(test_exec_req),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_crc_and_exit),
		cmocka_unit_test(test_writer_good),
		cmocka_unit_test(test_writer_refuses),
		cmocka_unit_test(test_fixup_req),
		cmocka_unit_test(test_client_deadline),
		cmocka_unit_test(test_flush_stall),
		cmocka_unit_test(test_writer_link_chain),
		cmocka_unit_test(test_writer_kinds_and_modes),
	};
	return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
