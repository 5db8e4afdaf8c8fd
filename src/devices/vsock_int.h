/* virtio-vsock's parts (devices/virtio_vsock.h is the device): what the
 * files of the device share.  Everything here runs on the device's event
 * loop with mmio.lock held.
 *
 *   virtio_vsock.c  the device: life cycle, transport callbacks, the event
 *                   loop, checkpoints, its line in the device table
 *   vsock_conn.c    the connection table: slots, RSTs owed, credit, bytes
 *                   buffered for a host socket
 *   vsock_tx.c      guest -> host: the tx queue's packets
 *   vsock_rx.c      host -> guest: the rx queue's packets
 *   vsock_host.c    host sockets: the listener, CONNECT lines, events,
 *                   deadlines */
#ifndef KOSA8_VSOCK_INT_H
#define KOSA8_VSOCK_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "devices/virtio_vsock.h"

#define RXQ 0
#define TXQ 1
#define EVQ 2
/* Work per loop turn, so that a busy device lets the vCPUs at the lock. */
#define TX_BUDGET 32
#define RX_BUDGET 64
#define ACCEPT_BUDGET 16
#define LOOP_EVENTS 64
#define RST_BACKLOG 512
#define HOST_PORT_FIRST (1u << 30) /* host ports we pick for host -> guest */
#define SHUT_BOTH (VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND)
#define LOG_KIND 0x56534bu /* "VSK" for log_once */
/* epoll tags: conns carry (serial << 16 | slot); the rest serial 0. */
#define TAG_KICK 1
#define TAG_LISTEN 2

enum conn_state {
	C_HOST_LINE,    /* host client accepted, its CONNECT line not read yet */
	C_HOST_REQUEST, /* REQUEST owed or sent to the guest, awaiting RESPONSE */
	C_ESTABLISHED,
};

struct vsock_conn {
	int fd;
	uint32_t slot;
	uint64_t serial;
	enum conn_state state;
	uint32_t local_port, peer_port; /* host side, guest side */
	bool readable, writable, rdhup, hup;  /* edge-triggered socket state */
	bool need_request, need_response, need_credit;
	bool shut_sent;                 /* we told the guest the host is done */
	bool host_wr_shut;
	uint32_t guest_shut;            /* VIRTIO_VSOCK_SHUTDOWN_* the guest sent */
	/* host -> guest: the guest's credit */
	uint32_t peer_buf_alloc, peer_fwd_cnt, tx_cnt;
	/* guest -> host: our credit, and bytes the host socket has not taken */
	uint32_t rx_cnt, fwd_cnt, fwd_reported;
	uint8_t *buf;
	uint32_t buf_head, buf_len;
	uint64_t deadline;              /* ms, CLOCK_MONOTONIC; 0 = none */
};

struct vsock_rst {
	uint64_t local_cid;
	uint32_t local_port, peer_port;
};

/* vsock_conn.c */
bool vsock_again(void);
struct vsock_conn *vsock_conn_find(struct virtio_vsock *v, uint32_t peer, uint32_t local);
void vsock_queue_rst(struct virtio_vsock *v, uint64_t cid, uint32_t local, uint32_t peer);
struct vsock_conn *vsock_conn_new(struct virtio_vsock *v, int fd);
void vsock_conn_free(struct virtio_vsock *v, struct vsock_conn *c, bool rst);
void vsock_conn_error(struct virtio_vsock *v, struct vsock_conn *c, const char *why);
void vsock_drop_all(struct virtio_vsock *v);
void vsock_credit_check(struct virtio_vsock *v, struct vsock_conn *c);
int vsock_chain_iov(const struct virtq_chain *ch, bool in, size_t skip, size_t len,
		    struct iovec *iov);
ssize_t vsock_send_iov(int fd, struct iovec *iov, int n);
void vsock_conn_settle(struct virtio_vsock *v, struct vsock_conn *c);
void vsock_conn_flush(struct virtio_vsock *v, struct vsock_conn *c);

/* vsock_tx.c: at most TX_BUDGET packets from the guest. */
void vsock_tx_process(struct virtio_vsock *v);

/* vsock_rx.c: RSTs owed, then a round of packets for the connections. */
void vsock_rx_pump(struct virtio_vsock *v);

/* vsock_host.c */
int vsock_open_listener(struct virtio_vsock *v);
void vsock_host_accept(struct virtio_vsock *v);
void vsock_conn_event(struct virtio_vsock *v, struct vsock_conn *c, uint32_t ev);
/* Expires handshakes and closes; returns ms until the next deadline, or -1. */
int vsock_check_deadlines(struct virtio_vsock *v);

#endif
