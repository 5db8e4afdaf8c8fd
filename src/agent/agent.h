/* kosa8-agent: the guest agent (see docs/agent-protocol.md).
 *
 * main.c    arguments, PID 1 duties (mounts, reaping, power-off), listening
 * session.c one accepted connection: hello, then one request at a time
 * exec.c    running a command with streamed stdio, pty, signals, exit status
 * user.c    /etc/passwd and /etc/group lookups (no NSS in a static binary)
 * fixup.c   after a restore: RNG reseed, clock, identity (AP_FIXUP)
 * net.c     the guest's network: netfilter redirect of TCP and DNS, relayed
 *           to the host over vsock (docs/egress.md)
 * trust.c   the host's CA certificate into the guest's trust store */
#ifndef KOSA8_AGENT_H
#define KOSA8_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agentproto/conn.h"
#include "agentproto/wire.h"
#include "common/fileio.h"

struct agent_cfg {
	const char *default_user;
	pid_t main_pid;          /* the listening process, told about power requests */
	uint64_t start_ms;       /* CLOCK_BOOTTIME at start */
};
extern struct agent_cfg agent_cfg;

struct agent_user {
	uid_t uid;
	gid_t gid;
	char name[64];
	char home[512];
	char shell[256];
	gid_t groups[64];        /* supplementary groups from /etc/group */
	int ngroups;
};

/* Resolves a user name or decimal uid (NULL: the default user).  A numeric
 * uid without a passwd line is allowed (gid = uid, home "/"); an unknown
 * name is -ENOENT with err set. */
int user_lookup(const char *spec, struct agent_user *u, char *err, size_t errsz);

/* Runs one AP_EXEC request to completion.  0 when the session can go on
 * (including requests answered with AP_ERROR), -errno when it must close. */
int exec_run(struct ap_conn *c, uint32_t chan, const uint8_t *p, size_t len);

/* Runs one AP_FIXUP request (fixup.c); return as exec_run. */
int fixup_run(struct ap_conn *c, uint32_t chan, const uint8_t *p, size_t len);

/* Serves one connection until it closes; owns fd. */
void session_run(int fd);

uint64_t boottime_ms(void);

/* Answers one AP_TRUST request: the PEM certificate in the payload is added
 * to the guest's trust store.  0 when the session can go on. */
int trust_ca(struct ap_conn *c, const struct ap_frame *f);

/* Where the egress loop listens and where it reaches the host.  upstream
 * NULL: vsock CID 2; else the unix sockets "<upstream>_<port>" (tests). */
struct net_opts {
	const char *upstream;
	const char *tcp_listen;   /* "127.0.0.1:1081": the REDIRECT target */
	const char *dns_listen;   /* "127.0.0.53:53", UDP and TCP */
};
extern struct net_opts net_opts;

/* Loopback, the dummy default route, IPv6 off, the nat rules.  As PID 1,
 * before anything else runs.  0 or the first -errno (all steps are tried). */
int net_setup(void);
/* The egress loop; returns only on a fatal error (-errno). */
int net_serve(void);
struct sockaddr_in;
/* Writes the K8E1 header for dst into out; returns EGRESS_HDR_V4_LEN. */
size_t net_egress_header(uint8_t *out, const struct sockaddr_in *dst);

#endif
