/* virtio socket device (virtio 1.x, 5.10), stream sockets only, whose host
 * side ends in unix sockets, one set per sandbox (the layout Firecracker's
 * vsock uses, see docs/vsock.md):
 *
 *   guest -> host port P: the device connects to "<uds_path>_<P>";
 *   host -> guest port P: a client connects to "<uds_path>", writes
 *   "CONNECT <P>\n", and is answered "OK <host port>\n" once the guest
 *   accepted (or closed if it refused).
 *
 * One event-loop thread per device serves the queues and the sockets.  Flow
 * control is the spec's credit scheme both ways: the device never puts more
 * into the guest than the guest's buf_alloc leaves room for, stops reading a
 * host socket while the guest has no room, and buffers at most buf_alloc
 * bytes per connection towards the host.  Connections are bounded in number;
 * a packet the guest gets wrong is answered with RST or dropped, a chain that
 * breaks the ring rules marks the device DEVICE_NEEDS_RESET. */
#ifndef KOSA8_VIRTIO_VSOCK_H
#define KOSA8_VIRTIO_VSOCK_H

#include <sys/socket.h> /* older linux/vm_sockets.h (6.1) use struct sockaddr without it */
#include <linux/vm_sockets.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "virtio/mmio.h"

#define VIRTIO_ID_VSOCK_DEVICE 19
#define VSOCK_HOST_CID VMADDR_CID_HOST /* 2: the host, in the vsock specification */
#define VSOCK_HDR_LEN 44            /* struct virtio_vsock_hdr */
#define VSOCK_MAX_PKT (64 * 1024)   /* payload of one packet (Linux's limit too) */
#define VSOCK_LINE_MAX 32           /* "CONNECT <port>\n" and its answer */

#define VSOCK_DEFAULT_MAX_CONNS 1024
#define VSOCK_DEFAULT_BUF_ALLOC (128 * 1024)
#define VSOCK_DEFAULT_HANDSHAKE_MS 5000
#define VSOCK_DEFAULT_CLOSE_MS 10000

/* Tunables; a zero field takes the default above. */
struct virtio_vsock_opts {
	uint32_t max_conns;     /* open connections, both directions (<= 65535) */
	uint32_t buf_alloc;     /* per connection, guest -> host bytes we buffer */
	uint32_t handshake_ms;  /* CONNECT line, then the guest's RESPONSE */
	uint32_t close_ms;      /* a closing connection's last flush / RST */
	bool no_thread;         /* tests and fuzzing: the caller runs virtio_vsock_poll */
};

struct virtio_vsock_stats {
	uint64_t conns_open;
	uint64_t guest_connects, host_connects; /* accepted, each direction */
	uint64_t refused;       /* guest REQUESTs and host clients turned away */
	uint64_t bad_packets;   /* dropped or answered with RST */
	uint64_t bad_lines;     /* host clients closed for their CONNECT line */
	uint64_t timeouts;
	uint64_t rst_sent, rst_dropped; /* RSTs owed to the guest with no room left */
	uint64_t bytes_to_guest, bytes_to_host;
	uint64_t transport_resets;      /* reset events delivered */
};

/* What a checkpoint stores.  Open connections are deliberately not in it:
 * after a restore the guest gets VIRTIO_VSOCK_EVENT_TRANSPORT_RESET and
 * connects again. */
struct virtio_vsock_state {
	uint32_t version;
	uint32_t reserved;
	uint64_t guest_cid;     /* the CID when saved; restore keeps the device's own */
	struct virtio_mmio_state mmio;
};
#define VIRTIO_VSOCK_STATE_VERSION 1

struct vsock_conn;
struct vsock_rst;

struct virtio_vsock {
	struct virtio_mmio mmio;
	uint64_t guest_cid;
	/* After a restore with another CID (a fork), the guest's own packets
	 * carry the saved CID until its driver has read the new one on the
	 * reset event: accepted as the guest's until a packet with the new
	 * one comes, then dropped like any other.  0: none. */
	uint64_t prev_cid;
	char uds_path[96];      /* plus "_<port>" still fits sun_path (108) */
	struct virtio_vsock_opts opts;
	int epoll_fd, kick_fd, listen_fd;
	pthread_t thread;
	bool thread_started, inited;
	volatile int stopping;
	/* Everything below is the event loop's, touched with mmio.lock held. */
	bool paused;
	pthread_cond_t resumed;
	uint64_t generation, seen_generation; /* bumped by reset and restore */
	bool event_pending;                   /* a TRANSPORT_RESET is owed */
	struct vsock_conn **conns;            /* max_conns slots, lowest free first */
	uint32_t nconns, nslots, rr;          /* nslots: highest used slot + 1 */
	uint64_t next_serial;
	uint32_t next_host_port;
	struct vsock_rst *rsts;               /* RSTs owed for connections already gone */
	uint32_t rst_head, rst_count;
	struct virtq_chain *txc, *rxc;
	bool more_work, pushed[3];
	int wait_ms;
	uint64_t listen_paused_until;
	struct virtio_vsock_stats stats;
};

/* Creates the device and its listening socket at uds_path (a stale socket
 * there is replaced; a live one is -EADDRINUSE, anything else -EEXIST) and
 * starts its thread.
 * guest_cid must be 3 .. 0xfffffffe.  opts may be NULL.  Returns 0 or a
 * negative errno, having cleaned up after itself. */
int virtio_vsock_init(struct virtio_vsock *v, uint64_t guest_cid, const char *uds_path,
		      const struct virtio_vsock_opts *opts, const struct guest_mem *mem,
		      uint64_t base, uint32_t gsi,
		      void (*set_irq)(void *ctx, uint32_t gsi, int level), void *irq_ctx);
/* Stops the thread, closes every connection and the listening socket
 * (and removes its path).  Safe after a failed init, and twice. */
void virtio_vsock_destroy(struct virtio_vsock *v);

/* While paused the device touches neither guest memory nor its sockets:
 * pause before saving the device and guest memory, resume afterwards. */
void virtio_vsock_pause(struct virtio_vsock *v);
void virtio_vsock_resume(struct virtio_vsock *v);

void virtio_vsock_save(struct virtio_vsock *v, struct virtio_vsock_state *out);
/* Loads a saved state (-EINVAL for another version or a bad transport
 * state), closes every open connection and owes the guest a transport reset
 * event, delivered as soon as it has an event buffer.  The guest reads the
 * device's CID again on that event, so a fork's new CID takes effect. */
int virtio_vsock_restore(struct virtio_vsock *v, const struct virtio_vsock_state *in);

void virtio_vsock_get_stats(struct virtio_vsock *v, struct virtio_vsock_stats *out);

/* The device at --vsock (struct vm_config's vsock_uds and vsock_cid). */
extern const struct device_ops virtio_vsock_device;

/* One turn of the event loop, waiting at most timeout_ms (no_thread mode). */
void virtio_vsock_poll(struct virtio_vsock *v, int timeout_ms);

/* --- Parsers of untrusted input, public for the unit tests and fuzzing --- */

/* A packet header in host byte order. */
struct vsock_pkt {
	uint64_t src_cid, dst_cid;
	uint32_t src_port, dst_port, len;
	uint16_t type, op;
	uint32_t flags, buf_alloc, fwd_cnt;
};

enum vsock_verdict { VSOCK_PKT_OK, VSOCK_PKT_RST, VSOCK_PKT_DROP };

/* Checks a guest tx header: len bytes at buf (fewer than VSOCK_HDR_LEN:
 * DROP), room the payload bytes that follow it in the chain.  A packet
 * claiming another source CID is dropped (a reply would go elsewhere); a
 * wrong destination, type, op or length gets RST, except an RST itself. */
enum vsock_verdict vsock_parse_tx_hdr(const uint8_t *buf, size_t len, uint64_t room,
				      uint64_t guest_cid, struct vsock_pkt *out);

/* Parses "CONNECT <port>\n" ("\r\n" allowed) at the start of buf.  Returns
 * the bytes the line takes, -EAGAIN while it may still complete, -EINVAL
 * for anything else (including a line longer than VSOCK_LINE_MAX). */
int vsock_parse_connect_line(const char *buf, size_t len, uint32_t *port);

#endif
