/* Numbers on the wire between the guest agent and the host: every part
 * that speaks to the other side of the VM (the agent, the supervisor, the
 * egress proxy) takes them from here, so that none can drift.  Only
 * defines: the agent (libc only) includes it as the host does.
 *
 * The guest has no network device; its one way out is vsock to the host,
 * and the host listens only on the ports below (docs/vsock.md,
 * docs/egress.md, docs/agent-protocol.md). */
#ifndef KOSA8_AGENTPROTO_WIRE_H
#define KOSA8_AGENTPROTO_WIRE_H

/* Before linux/vm_sockets.h: the uapi headers of Debian's arm64 cross
 * toolchain (6.1.4) use struct sockaddr there without including it. */
#include <sys/socket.h>
#include <linux/vm_sockets.h>

/* The host's vsock address as the guest sees it: the well-known host CID
 * of the vsock specification (2), what the agent connects to. */
#define WIRE_HOST_CID VMADDR_CID_HOST

/* The guest agent listens on this vsock port; the supervisor connects to
 * it (through the VMM's vsock socket) for exec, files, shutdown and the
 * clock fix-up, in the agent protocol (agentproto/proto.h). */
#define AGENT_VSOCK_PORT 1024

/* The host's DNS port: one stream of DNS messages, each preceded by its
 * length as 2 bytes big-endian (RFC 1035 4.2.2); answered in order. */
#define EGRESS_DNS_PORT 1053

/* The host's TCP port: one vsock connection per guest TCP connection,
 * opened by the egress header below and then the stream itself. */
#define EGRESS_TCP_PORT 1080

/* The egress header the agent writes first on EGRESS_TCP_PORT:
 *   4 bytes  EGRESS_HDR_MAGIC
 *   1 byte   family: 4 or 6
 *   1 byte   0 (reserved)
 *   2 bytes  destination port, big-endian
 *   4 or 16  destination address, network order
 * The host writes nothing before the stream; a refused connection is
 * closed.  "K8E1": kosa8 egress, version 1. */
#define EGRESS_HDR_MAGIC "K8E1"
#define EGRESS_HDR_MAGIC_LEN 4
#define EGRESS_HDR_V4_LEN (8 + 4)
#define EGRESS_HDR_MAX (8 + 16)

#endif
