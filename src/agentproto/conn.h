/* One framed agent-protocol connection over a non-blocking stream socket,
 * used by both the agent and the host client.  Outgoing frames queue in a
 * buffer that the caller drains with ap_conn_flush() when the socket is
 * writable; incoming bytes gather until one whole frame is there.  Both
 * buffers are bounded: the input by one maximal frame, the output by what the
 * caller queues (flow control keeps that small). */
#ifndef KOSA8_AGENTPROTO_CONN_H
#define KOSA8_AGENTPROTO_CONN_H

#include "agentproto/proto.h"

struct ap_conn {
	int fd;
	uint8_t in[AP_HDR_SIZE + AP_MAX_PAYLOAD];
	size_t in_len;      /* bytes in `in` */
	size_t in_used;     /* bytes of `in` consumed by the last frame */
	uint8_t *out;
	size_t out_len, out_off, out_cap;
	bool eof;
	int stall_ms;       /* ap_conn_flush_all gives up after this long without progress */
};
#define AP_STALL_MS 30000

struct ap_frame {
	struct ap_hdr h;
	const uint8_t *p;   /* h.len bytes, valid until the next ap_conn_next() */
};

/* Takes ownership of fd (closed by ap_conn_close) and makes it non-blocking. */
int ap_conn_open(struct ap_conn **out, int fd);
void ap_conn_close(struct ap_conn *c);

/* Queues one frame.  -EMSGSIZE above AP_MAX_PAYLOAD, -ENOMEM. */
int ap_conn_send(struct ap_conn *c, uint16_t type, uint32_t chan, const void *p, size_t len);
int ap_conn_send_error(struct ap_conn *c, uint32_t chan, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
size_t ap_conn_pending(const struct ap_conn *c);
/* Writes what the socket takes now: 0 (maybe with data still pending) or -errno. */
int ap_conn_flush(struct ap_conn *c);
/* Blocks until everything queued is written: -ETIMEDOUT when the peer
 * takes nothing for stall_ms (AP_STALL_MS unless set), -1 waits forever. */
int ap_conn_flush_all(struct ap_conn *c);

/* Returns 1 and the next whole frame if one is buffered, 0 if more bytes are
 * needed, -EBADMSG for a malformed header. */
int ap_conn_next(struct ap_conn *c, struct ap_frame *f);
/* Reads what the socket has now: >0 bytes, 0 if none yet (EAGAIN),
 * -ECONNRESET at end of stream, or -errno. */
int ap_conn_fill(struct ap_conn *c);
/* Blocks (flushing output meanwhile) until a frame arrives: 0, or -errno
 * (-ECONNRESET if the peer closed, -ETIMEDOUT after timeout_ms >= 0). */
int ap_conn_recv(struct ap_conn *c, struct ap_frame *f, int timeout_ms);

#endif
