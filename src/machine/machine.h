/* The helper machine: where this host's KVM cannot run kosa8's guests (no
 * /dev/kvm, or a software KVM such as kvm-pvm), sandboxes run inside one
 * persistent QEMU machine under software emulation, whose nested KVM can
 * (testbed/machine boots it; see docs/machine.md).
 *
 * The machine sees the host's root over a writable 9p share and runs its
 * kosa8 commands as this user, so the state dir (sandboxes, checkpoints,
 * the audit log), the config dir (policy, secrets), workspaces and copy
 * destinations are the host's own files.  The host CLI forwards a sandbox
 * command line through a request directory in the machine's directory
 * (<state>/machine/requests/, the user's alone: private_dir), which the
 * machine's `kosa8 machine __serve` polls:
 *
 *   request   written by the host before the directory gets its name:
 *             "kosa8-machine-request 1\0" then KEY\0VALUE\0 pairs: exe (the
 *             kosa8 binary), cwd, tty ("ROWS COLS", only when the command
 *             gets a terminal), arg (repeated, argv in order), env
 *             (repeated, NAME=VALUE)
 *   client    made by the host before the directory gets its name, and
 *             flock'ed by it for its whole life: a free lock is a client
 *             that has gone (machine_sweep_requests removes the directory)
 *   alive     made then too, touched by the host every second (serve.c
 *             ends a command whose host has gone quiet)
 *   started   made by the server (O_EXCL) when it takes the request
 *   in        the command's stdin, appended by the host; in.eof: no more.
 *             At most MACHINE_IN_MAX bytes the command has not taken yet:
 *             the host reads no more of its stdin until the machine says
 *             it took them (in.pos), as a full pipe would make it wait,
 *             and punches out of "in" what was taken
 *   in.pos    how many bytes of "in" the command has taken, in decimal,
 *             written ("0") when the command starts and replaced (rename)
 *             as it takes more; a server older than this never writes it
 *   out, err  the command's stdout and stderr, appended by the machine;
 *             the host punches out what it copied (MACHINE_OUT_PUNCH)
 *   winsize   "ROWS COLS", replaced (rename) by the host on SIGWINCH
 *   signal    a signal number, made by the host (rename) on SIGINT & co.
 *   status    the exit status (128+N for signal N), written last (rename)
 *
 * Polling files over 9p rather than a stream: this host has no
 * vhost-vsock, and a QEMU virtio-serial port serves one host client at a
 * time with no clean way to tell one session's bytes from the next;
 * a directory per request is concurrent, ordered and owned by nothing
 * but file permissions.  Nothing a sandbox guest controls reaches it: the
 * guests are nested VMs whose only way out is vsock to their supervisor. */
#ifndef KOSA8_MACHINE_MACHINE_H
#define KOSA8_MACHINE_MACHINE_H

#include <stdbool.h>
#include <stddef.h>

#define MACHINE_REQ_MAGIC "kosa8-machine-request 1"
#define MACHINE_REQ_MAX (1024 * 1024)   /* bytes of one request file */
#define MACHINE_REQ_MAX_ITEMS 8192      /* args + env entries */
/* Commands one user runs in the machine at once (request directories). */
#define MACHINE_MAX_REQUESTS 64
/* A request directory without its "client" file this old is a leftover. */
#define MACHINE_REQ_ORPHAN_S 60
/* The host punches what it copied out of "out" and "err" in steps of this. */
#define MACHINE_OUT_PUNCH (1024 * 1024)
/* Bytes of stdin written to "in" that the command has not taken yet. */
#define MACHINE_IN_MAX (1024 * 1024)

struct machine_req {
	const char *exe;
	const char *cwd;
	bool tty;
	unsigned rows, cols;
	int argc, envc;
	char **argv; /* argc entries and a NULL, pointing into the parsed buffer */
	char **env;  /* envc entries and a NULL */
};

/* Parses a request file's bytes (data is modified: the strings point into
 * it).  0, or -EINVAL with why.  free machine_req_free()s the arrays. */
int machine_req_parse(char *data, size_t len, struct machine_req *r, char *why, size_t whylen);
void machine_req_free(struct machine_req *r);
/* Encodes a request into a malloc'd buffer: 0 or -errno (-E2BIG over the
 * bounds the parser takes). */
int machine_req_encode(const char *exe, const char *cwd, bool tty, unsigned rows, unsigned cols,
		       char *const argv[], char *const env[], char **out, size_t *outlen);

/* Why this host's KVM cannot run kosa8's guests, or NULL if it can. */
const char *machine_kvm_unusable(void);

/* <state>/machine ($KOSA8_MACHINE_DIR if set), made 0700 and checked to be
 * the user's alone (create), or just named.  0 or -errno with why. */
int machine_dir(char *buf, size_t len, bool create, char *why, size_t whylen);
/* 1 running (QEMU holds the directory's owner.lock; *pid is QEMU's), 0
 * not, or -errno. */
int machine_running(const char *dir, int *pid);
/* 1 when its server has said it is ready, else 0. */
int machine_ready(const char *dir);

/* Removes the request directories whose client has gone (killed: its
 * lock on the directory's "client" file is free) and leftovers without
 * one; returns how many are left (commands running), or -errno. */
int machine_sweep_requests(const char *dir);

/* Runs argv (argv[0] is the command's name, e.g. "run") in the machine
 * from this process's cwd, with its environment, stdin, stdout, stderr and
 * terminal; returns the command's exit status, or 125 with a message when
 * the machine failed it. */
int machine_forward(const char *dir, int argc, char **argv);

/* The machine's side: serves requests in dir until dir/stop appears.
 * Runs as uid:gid when uid is not 0 (the host user), giving each command
 * XDG_RUNTIME_DIR=rundir (a directory of the machine's own, for sockets).
 * Returns 0 when stopped, else -errno. */
int machine_serve(const char *dir, unsigned uid, unsigned gid, const char *rundir);

#endif
