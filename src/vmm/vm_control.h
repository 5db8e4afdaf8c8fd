/* The VMM's control socket (kosa8 vm --control PATH): JSON lines
 * (common/jsonl.h), one request and one reply at a time, documented in
 * docs/control-protocol.md.  The supervisor is its only client in a
 * sandbox; `kosa8 vmctl` is the low-level tool on top of it.
 *
 * Both ends treat the other as untrusted: the VMM runs a guest, the
 * supervisor's side may be another process of the user.  Requests and
 * replies are decoded here, strictly (known fields of the right type, paths
 * bounded), so that neither side reads a field the other did not mean. */
#ifndef KOSA8_VM_CONTROL_H
#define KOSA8_VM_CONTROL_H

#include <cjson/cJSON.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

/* Longest request or reply line: two paths (PATH_MAX each, escaped) and a
 * little more fit. */
#define VM_CONTROL_MAX_LINE (20 * 1024)
#define VM_CONTROL_PATH_MAX 4096

enum vm_control_op {
	VMCTL_PAUSE,
	VMCTL_RESUME,
	VMCTL_STATUS,
	VMCTL_STOP,
	VMCTL_CHECKPOINT,
};

struct vm_control_req {
	enum vm_control_op op;
	/* checkpoint: the directory to write (must not exist), the new top
	 * delta ("" : next to the old one) and whether it is for a live fork
	 * (the reply may pass the frozen memory's descriptor). */
	char dir[VM_CONTROL_PATH_MAX];
	char top[VM_CONTROL_PATH_MAX];
	bool live;
};

struct vm_control_reply {
	bool ok;
	/* One line for the user: what was done, or (ok false) what failed. */
	char text[1024];
	/* pause, resume, status: "running" or "paused" ("" otherwise). */
	char state[16];
	/* checkpoint: bytes of memory written, how long the guest was paused,
	 * whether the memory was a layer over the previous checkpoint and
	 * whether the reply passed the frozen memory (live). */
	uint64_t memory_bytes;
	double paused_ms;
	bool layer, live;
};

/* Decoders of what the other side sent: 0, or -EPROTO with *why set. */
int vm_control_req_decode(const cJSON *msg, struct vm_control_req *req, const char **why);
int vm_control_reply_decode(const cJSON *msg, struct vm_control_reply *rep, const char **why);
/* Encoders (NULL when out of memory). */
cJSON *vm_control_req_encode(const struct vm_control_req *req);
cJSON *vm_control_reply_encode(const struct vm_control_reply *rep);

/* Client side: sends req to the VMM at path and decodes its reply into
 * *rep.  0 when the VMM did it, -EREMOTEIO when it refused (rep->text says
 * why), other -errno when there was no valid answer (no VMM there, timed
 * out after timeout_ms, a malformed reply: rep->text says which).  fd_out
 * (NULL: none accepted) gets a descriptor the reply carried, or -1. */
int vm_control_call(const char *path, const struct vm_control_req *req,
		    struct vm_control_reply *rep, int *fd_out, int timeout_ms);

/* Server side, served by vm_run's main loop (vm_control.c). */
struct vm;
int vm_control_open(struct vm *vm, const char *path, const char **why);
void vm_control_close(struct vm *vm);
/* Fills one pollfd; returns how many (0 or 1). */
int vm_control_pollfds(struct vm *vm, struct pollfd *pfd);
void vm_control_serve(struct vm *vm, const struct pollfd *pfd, int n);

#endif
