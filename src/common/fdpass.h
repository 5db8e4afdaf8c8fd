/* Passing one file descriptor with a message on a unix stream socket
 * (SCM_RIGHTS): the one implementation every control hop uses.
 *
 * A descriptor travels with the first byte of the message it belongs to.
 * The receiving side treats the peer as untrusted: a truncated control
 * message, more than one descriptor, any other ancillary data or a
 * descriptor nobody asked for is refused (-EPROTO) and every descriptor
 * that did arrive is closed, so nothing leaks into the receiver.  Received
 * descriptors are close-on-exec. */
#ifndef KOSA8_FDPASS_H
#define KOSA8_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/* Sends all len bytes of buf (len > 0), fd attached to the first byte when
 * fd >= 0.  0 or -errno (-EPIPE when the peer is gone; no SIGPIPE). */
int fdpass_send(int sock, const void *buf, size_t len, int fd);

/* One recvmsg of at most len bytes into buf.  Returns the byte count (0 at
 * end of stream) or -errno.  fd_out may be NULL (no descriptor expected);
 * otherwise a descriptor that came with these bytes is stored there, and
 * one arriving while *fd_out already holds one is a protocol error (the
 * held one stays the caller's). */
ssize_t fdpass_recv(int sock, void *buf, size_t len, int *fd_out);

#endif
