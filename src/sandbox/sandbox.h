/* A sandbox on disk: its name, configuration and where its files live.
 *
 *   state dir   <kosa8 state>/sandboxes/NAME/  (0700)
 *                 sandbox.json   configuration (this file's struct)
 *                 disk.k8d       top delta of its disk, over the image
 *                 policy         the sandbox's own egress policy (optional)
 *                 console.log    the guest's serial console
 *                 supervisor.log what the supervisor said
 *   run dir     $XDG_RUNTIME_DIR/kosa8/NAME/ or /tmp/kosa8-UID/NAME/ (0700)
 *                 control.sock   the supervisor's control socket
 *                 vm/            all of the host the jailed VMM sees (0700):
 *                   vsock.sock   the VMM's vsock device (host side)
 *                   vsock.sock_1053, _1080  egress listeners (guest -> host)
 *                 supervisor.pid
 * Both directories are private to the user: another user cannot reach a
 * sandbox's sockets (and the supervisor checks peer credentials as well). */
#ifndef KOSA8_SANDBOX_H
#define KOSA8_SANDBOX_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SANDBOX_NAME_MAX 63
#define SANDBOX_ALLOW_MAX 32      /* --allow rules */
#define SANDBOX_ALLOW_LEN 272     /* "*.name:port" */
#define SANDBOX_SECRETS_MAX 16    /* --secret names */
#define SANDBOX_SECRET_LEN 65
#define SANDBOX_FIRST_CID 3       /* the VMM's default; older sandbox.json files have no cid */

struct sandbox_cfg {
	char name[SANDBOX_NAME_MAX + 1];
	char kernel[PATH_MAX];     /* guest kernel (bzImage) */
	char image[PATH_MAX];      /* base image (ext4) the disk delta sits on */
	char workspace[PATH_MAX];  /* host directory copied to /workspace, or "" */
	uint64_t mem;              /* bytes */
	int cpus;
	uint32_t cid;              /* the guest's vsock CID, its own among the user's sandboxes */
	int64_t created;           /* unix seconds */
	bool workspace_copied;     /* the first start copied the workspace in */
	/* Egress (docs/egress.md): --allow rules over the policy files, and
	 * the secrets whose placeholders the guest gets. */
	char allow[SANDBOX_ALLOW_MAX][SANDBOX_ALLOW_LEN];
	int nallow;
	char secrets[SANDBOX_SECRETS_MAX][SANDBOX_SECRET_LEN];
	int nsecrets;
};

/* Names: 1-63 of [a-z0-9_.-], starting with a letter or digit. */
bool sandbox_name_valid(const char *name);

int sandbox_state_dir(const char *name, char *buf, size_t len);
int sandbox_run_dir(const char *name, char *buf, size_t len);
/* The same, checked (common/util.h private_dir) level by level, made 0700
 * as needed with create: the run directory's base ($XDG_RUNTIME_DIR/kosa8
 * or /tmp/kosa8-UID, which another user could make first) and NAME; the
 * state's sandboxes/ and NAME.  The state root itself may be the user's
 * own choice ($KOSA8_STATE_DIR, a link): it must be the user's and not
 * writable by others.  0, or -errno and why says which and what to do. */
int sandbox_run_dir_private(const char *name, bool create, char *buf, size_t len, char *why,
			    size_t wlen);
int sandbox_state_dir_private(const char *name, bool create, char *buf, size_t len, char *why,
			      size_t wlen);
/* <dir>/<file> into buf; -ENAMETOOLONG if it does not fit. */
int sandbox_path(char *buf, size_t len, const char *dir, const char *file);

int sandbox_cfg_save(const char *state_dir, const struct sandbox_cfg *c);
/* A vsock CID no sandbox of this user has (the smallest from
 * SANDBOX_FIRST_CID, at most 0xffff), for a new sandbox or a fork: a
 * fork's guest sees its CID change (transport reset) and software in it
 * can tell the copies apart.  The VMM's uid comes from it (vmm/jail.h), so
 * a caller holds sandbox_create_lock() (sandbox/owner.h) from the pick
 * until the new sandbox.json is written.  0 when all are taken. */
#define SANDBOX_MAX_SANDBOXES (0x10000u - SANDBOX_FIRST_CID)
uint32_t sandbox_cid_pick(void);
/* -ENOENT when there is no such sandbox, -EBADMSG for a damaged file. */
int sandbox_cfg_load(const char *state_dir, struct sandbox_cfg *c);

/* Calls fn for every sandbox name in the state directory. */
int sandbox_list(void (*fn)(const char *name, void *ctx), void *ctx);

#endif
