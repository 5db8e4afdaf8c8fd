/* Who owns a sandbox: a held lock, never a guess.
 *
 * A sandbox's state directory holds owner.lock.  Its owner (the supervisor,
 * for its whole life, or `kosa8 rm` while it removes the sandbox) holds an
 * exclusive flock on it and writes "PID ROLE" into it for messages.  The
 * lock belongs to the open file, so it is gone the moment every process
 * holding it has ended, crashed or not: the supervisor passes it to its
 * VMM, and a VMM that outlives its supervisor keeps the sandbox owned (no
 * second VMM ever runs on the same disk).
 *
 * The sandboxes' directory holds .create.lock: held while a new sandbox
 * picks its vsock CID and writes its sandbox.json, so two creates at once
 * never pick the same CID (nor the same VMM uid, which comes from it).
 *
 * The CLI and the supervisor use this; the VMM never does. */
#ifndef KOSA8_SANDBOX_OWNER_H
#define KOSA8_SANDBOX_OWNER_H

#include <stddef.h>
#include <sys/types.h>

#define SANDBOX_OWNER_FILE "owner.lock"
#define SANDBOX_CREATE_LOCK ".create.lock"

struct sandbox_owner {
	pid_t pid;       /* 0 when the file does not say */
	char role[16];   /* "supervisor", "rm", or "" */
};

/* Takes the lock on the sandbox in state_dir for the caller's life (its
 * descriptor, close-on-exec, is returned) and writes "getpid() role" in
 * it.  -EBUSY when someone owns it (*who says whom), -ENOENT when the
 * sandbox's directory is gone, else -errno. */
int sandbox_owner_take(const char *state_dir, const char *role, struct sandbox_owner *who);
/* The same, waiting up to timeout_ms for the owner to go: -ETIMEDOUT. */
int sandbox_owner_wait(const char *state_dir, const char *role, int timeout_ms,
		       struct sandbox_owner *who);
/* 1 when the sandbox is owned (*who says whom), 0 when not, or -errno.
 * Never blocks and never stops an owner from taking the lock. */
int sandbox_owner_probe(const char *state_dir, struct sandbox_owner *who);

/* "sandbox 'NAME' is running (supervisor pid N)", or what the owner
 * does, into buf. */
void sandbox_owner_describe(const char *name, const struct sandbox_owner *who, char *buf,
			    size_t len);

/* Takes the create lock of the user's sandboxes' directory (created if
 * missing), waiting up to SANDBOX_CREATE_WAIT_MS: a descriptor to close
 * once the new sandbox's sandbox.json is written, or -errno. */
#define SANDBOX_CREATE_WAIT_MS (30 * 1000)
int sandbox_create_lock(void);

#endif
