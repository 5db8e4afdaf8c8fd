/* libFuzzer target: the agent protocol codec as a peer would feed it.  The
 * input is a byte stream pushed through a socketpair into ap_conn (frame
 * reassembly), and every frame that comes out goes to the decoder for its
 * type: exec requests, path requests, tree entries (with the path and
 * symlink checks, and an exact re-encoding round trip), fix-up requests
 * (bounds, and a re-encoding that decodes the same), exit records, and a
 * generic TLV walk.  Any out-of-bounds read, leak or abort is a bug. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agentproto/conn.h"
#include "common/guarded.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_entry(const struct ap_frame *f)
{
	struct ap_entry e;
	if (ap_entry_decode(f->p, f->h.len, &e))
		return;
	if (ap_path_check(e.path, e.path_len))
		abort();   /* decode must have refused it */
	if (e.kind == AP_E_SYMLINK) {
		char path[AP_MAX_PATH + 1], target[AP_MAX_PATH + 1];
		memcpy(path, e.path, e.path_len);
		path[e.path_len] = 0;
		memcpy(target, e.target, e.target_len);
		target[e.target_len] = 0;
		(void)gw_target_inside(path, target);
	}
	struct ap_wr w;
	ap_wr_init(&w);
	ap_entry_encode(&w, &e);
	if (!ap_wr_status(&w) && (w.len != f->h.len || memcmp(w.p, f->p, w.len)))
		abort();   /* the format is canonical: decode . encode = id */
	ap_wr_free(&w);
}

static void check_fixup(const struct ap_frame *f)
{
	struct ap_fixup_req q, again;
	struct ap_wr w;

	if (ap_fixup_req_decode(f->p, f->h.len, &q))
		return;
	if (q.seed_len < AP_FIXUP_SEED_MIN || q.seed_len > AP_FIXUP_SEED_MAX ||
	    (q.identity && !ap_hostname_valid(q.hostname, strlen(q.hostname))) ||
	    (!q.identity && q.hostname[0]))
		abort();
	ap_wr_init(&w);
	ap_fixup_req_encode(&w, &q);
	if (!ap_wr_status(&w) &&
	    (ap_fixup_req_decode(w.p, w.len, &again) || again.seed_len != q.seed_len ||
	     memcmp(again.seed, q.seed, q.seed_len) || again.time_ns != q.time_ns ||
	     again.identity != q.identity || strcmp(again.hostname, q.hostname) ||
	     memcmp(again.machine_id, q.machine_id, sizeof(q.machine_id))))
		abort();
	ap_wr_free(&w);
}

static void decode(const struct ap_frame *f)
{
	struct ap_exec_req q;
	struct ap_path_req pq;
	struct ap_exit x;
	struct ap_rd r;
	uint16_t tag;
	const uint8_t *v;
	uint32_t len;
	char text[64];

	switch (f->h.type) {
	case AP_EXEC:
		if (ap_exec_req_decode(f->p, f->h.len, &q) == 0) {
			if (!q.argv || !q.argv[0] || q.argv[q.argc])
				abort();
			ap_exec_req_free(&q);
		}
		break;
	case AP_PUT:
	case AP_GET:
		if (ap_path_req_decode(f->p, f->h.len, &pq) == 0)
			ap_path_req_free(&pq);
		break;
	case AP_ENTRY:
		check_entry(f);
		break;
	case AP_EXIT:
		(void)ap_exit_decode(f->p, f->h.len, &x);
		break;
	case AP_FIXUP:
		check_fixup(f);
		break;
	default:
		ap_rd_init(&r, f->p, f->h.len);
		while (ap_get_tlv(&r, &tag, &v, &len) == 1)
			;
		ap_text(f->p, f->h.len, text, sizeof(text));
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int sv[2];
	struct ap_conn *c;
	struct ap_frame f;
	if (size > 200 * 1024 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return 0;
	if (ap_conn_open(&c, sv[1])) {
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	size_t off = 0;
	bool closed = false;
	for (int rounds = 0; rounds < 10000; rounds++) {
		/* Feed in uneven pieces so that reassembly sees split headers. */
		if (off < size) {
			size_t n = 1 + (data[off] % 97) * 37;
			if (n > size - off)
				n = size - off;
			ssize_t w = write(sv[0], data + off, n);
			if (w > 0)
				off += (size_t)w;
		} else if (!closed) {
			shutdown(sv[0], SHUT_WR);
			closed = true;
		}
		int rc = ap_conn_fill(c);
		int got;
		while ((got = ap_conn_next(c, &f)) == 1)
			decode(&f);
		if (got < 0 || (rc < 0 && rc != -ECONNRESET) || (rc == -ECONNRESET && closed))
			break;
	}
	ap_conn_close(c);
	close(sv[0]);
	return 0;
}
