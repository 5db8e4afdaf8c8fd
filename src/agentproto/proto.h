/* kosa8 agent protocol: frame layout, message types and the bounds-checked
 * codec shared by the guest agent and the host client library.
 *
 * Everything here parses bytes a peer controls (the guest, for the host; the
 * host, for the guest), so every decoder checks every length before it reads
 * and fails with -EBADMSG instead of reading past the end.  The wire format is
 * documented in docs/agent-protocol.md; keep the two in step. */
#ifndef KOSA8_AGENTPROTO_PROTO_H
#define KOSA8_AGENTPROTO_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AP_VERSION_MAJOR 1
#define AP_VERSION_MINOR 1
#define AP_AGENT_VERSION "kosa8-agent 0.1"

#define AP_HDR_SIZE 12
/* Hard limit on one frame's payload: bounds every buffer on both sides. */
#define AP_MAX_PAYLOAD (64 * 1024)
/* Bytes of stdin (agent side) and of stdout+stderr (host side) a peer may
 * send before it has been granted more with AP_WINDOW. */
#define AP_INITIAL_WINDOW (256 * 1024)
/* A peer may never hold more credit than this: a larger grant is malformed. */
#define AP_MAX_WINDOW (64 * 1024 * 1024)
#define AP_MAX_ARGS 1024
#define AP_MAX_PATH 4096

enum ap_type {
	AP_HELLO = 1,       /* both ways, first frame: u16 major, u16 minor, text */
	AP_ERROR = 2,       /* agent->host: i32 errno, text */
	AP_OK = 3,          /* agent->host: request accepted/done, optional body */
	AP_PING = 4,        /* host->agent: empty */
	AP_PONG = 5,        /* agent->host: u64 sys uptime ms, u64 agent uptime ms, text */
	AP_EXEC = 6,        /* host->agent: TLV request (argv, env, cwd, user, pty) */
	AP_STARTED = 7,     /* agent->host: u32 pid */
	AP_STDIN = 8,       /* host->agent: bytes */
	AP_STDOUT = 9,      /* agent->host: bytes (pty output too) */
	AP_STDERR = 10,     /* agent->host: bytes */
	AP_STDIN_EOF = 11,  /* host->agent: empty */
	AP_WINDOW = 12,     /* both: u32 more bytes the sender may receive */
	AP_RESIZE = 13,     /* host->agent: u16 rows, u16 cols */
	AP_SIGNAL = 14,     /* host->agent: u32 signal number */
	AP_EXIT = 15,       /* agent->host: u8 kind, u8 core, u16 0, i32 code */
	AP_PUT = 16,        /* host->agent: TLV request (path, user) */
	AP_GET = 17,        /* host->agent: TLV request (path) */
	AP_ENTRY = 18,      /* tree stream: one entry header */
	AP_DATA = 19,       /* tree stream: file bytes */
	AP_FILE_END = 20,   /* tree stream: u64 length, u32 crc32 */
	AP_TREE_END = 21,   /* tree stream: u32 entries, u64 bytes */
	AP_SHUTDOWN = 22,   /* host->agent: empty */
	AP_REBOOT = 23,     /* host->agent: empty */
	AP_FIXUP = 24,      /* host->agent: TLV request (seed, time, hostname, machine-id) */
	AP_TRUST = 25,      /* host->agent: a CA certificate (PEM) for the guest's trust store (1.1) */
	AP_TYPE_MAX = 25,
};

/* TLV tags inside AP_EXEC / AP_PUT / AP_GET. */
enum ap_tag {
	AP_T_ARG = 1,     /* one argv element, in order */
	AP_T_ENV = 2,     /* one NAME=value */
	AP_T_CWD = 3,
	AP_T_USER = 4,    /* name or decimal uid */
	AP_T_PTY = 5,     /* u16 rows, u16 cols */
	AP_T_TERM = 6,
	AP_T_PATH = 7,
	AP_T_SEED = 8,        /* AP_FIXUP: AP_FIXUP_SEED_MIN..MAX bytes of host entropy */
	AP_T_TIME = 9,        /* AP_FIXUP: u64 ns since the epoch (the host's clock) */
	AP_T_HOSTNAME = 10,   /* AP_FIXUP: 1-63 of [A-Za-z0-9.-] */
	AP_T_MACHINE_ID = 11, /* AP_FIXUP: 16 bytes */
};

enum ap_exit_kind { AP_EXITED = 0, AP_KILLED = 1 };
/* Kinds 4-7 are never sent: a receiver names them when it refuses them. */
enum ap_entry_kind {
	AP_E_FILE = 1, AP_E_DIR = 2, AP_E_SYMLINK = 3,
	AP_E_HARDLINK = 4, AP_E_FIFO = 5, AP_E_DEVICE = 6, AP_E_SOCKET = 7,
	AP_E_KIND_MAX = 7,
};

struct ap_hdr {
	uint32_t len;
	uint16_t type;
	uint16_t flags;
	uint32_t chan;
};

/* Decodes a header from at least AP_HDR_SIZE bytes; -EBADMSG if the length
 * exceeds AP_MAX_PAYLOAD, the flags are not zero or the type is unknown. */
int ap_hdr_decode(const uint8_t *buf, struct ap_hdr *h);
void ap_hdr_encode(uint8_t *buf, uint16_t type, uint32_t chan, uint32_t len);

/* A reading cursor over a payload.  Every get fails once past the end. */
struct ap_rd {
	const uint8_t *p;
	size_t len, off;
};
void ap_rd_init(struct ap_rd *r, const void *p, size_t len);
int ap_get_u8(struct ap_rd *r, uint8_t *v);
int ap_get_u16(struct ap_rd *r, uint16_t *v);
int ap_get_u32(struct ap_rd *r, uint32_t *v);
int ap_get_u64(struct ap_rd *r, uint64_t *v);
int ap_get_bytes(struct ap_rd *r, size_t n, const uint8_t **v);
/* Next TLV (u16 tag, u32 len, value): 1 if one was read, 0 at the end. */
int ap_get_tlv(struct ap_rd *r, uint16_t *tag, const uint8_t **v, uint32_t *len);

/* A growable writing buffer; alloc failures are sticky and reported by
 * ap_wr_status(). */
struct ap_wr {
	uint8_t *p;
	size_t len, cap;
	int err;
};
void ap_wr_init(struct ap_wr *w);
void ap_wr_free(struct ap_wr *w);
void ap_put_u8(struct ap_wr *w, uint8_t v);
void ap_put_u16(struct ap_wr *w, uint16_t v);
void ap_put_u32(struct ap_wr *w, uint32_t v);
void ap_put_u64(struct ap_wr *w, uint64_t v);
void ap_put_bytes(struct ap_wr *w, const void *v, size_t n);
void ap_put_tlv(struct ap_wr *w, uint16_t tag, const void *v, size_t n);
void ap_put_tlv_str(struct ap_wr *w, uint16_t tag, const char *s);
int ap_wr_status(const struct ap_wr *w);

/* Decoded AP_EXEC request.  Strings are NUL-terminated copies owned by the
 * struct (ap_exec_req_free); argv and env end with NULL. */
struct ap_exec_req {
	char **argv;
	char **env;
	size_t argc, envc;
	char *cwd, *user, *term;
	bool pty;
	uint16_t rows, cols;
};
int ap_exec_req_decode(const uint8_t *p, size_t len, struct ap_exec_req *req);
void ap_exec_req_free(struct ap_exec_req *req);

/* Decoded AP_PUT / AP_GET: path (required) and user (optional). */
struct ap_path_req {
	char *path, *user;
};
int ap_path_req_decode(const uint8_t *p, size_t len, struct ap_path_req *req);
void ap_path_req_free(struct ap_path_req *req);

/* AP_ENTRY: u8 kind, u8 0, u16 0, u32 mode, u64 size, u16 path len, path,
 * u16 target len, target.  path and target point into the payload and are
 * NUL-free; path_len/target_len give their lengths. */
struct ap_entry {
	uint8_t kind;
	uint32_t mode;
	uint64_t size;
	const char *path, *target;
	uint16_t path_len, target_len;
};
int ap_entry_decode(const uint8_t *p, size_t len, struct ap_entry *e);
void ap_entry_encode(struct ap_wr *w, const struct ap_entry *e);

/* Decoded AP_FIXUP: what a guest run from a checkpoint must not keep of
 * it.  Seed and time are required; hostname and machine-id come together
 * (a fork's new identity) or not at all.  The reply is AP_OK with a u32 of
 * AP_FIX_* bits saying what was done. */
#define AP_FIXUP_SEED_MIN 32
#define AP_FIXUP_SEED_MAX 512
#define AP_HOSTNAME_MAX 63
enum ap_fix_done {
	AP_FIX_ENTROPY = 1,     /* the seed mixed into the pool (RNDADDENTROPY) */
	AP_FIX_RESEED = 2,      /* the CRNG reseeded from it (RNDRESEEDCRNG) */
	AP_FIX_CLOCK = 4,       /* CLOCK_REALTIME set */
	AP_FIX_HOSTNAME = 8,    /* sethostname and /etc/hostname */
	AP_FIX_MACHINE_ID = 16, /* /etc/machine-id */
	AP_FIX_BOOT_ID = 32,    /* /proc/sys/kernel/random/boot_id (stock kernels: read-only) */
};
struct ap_fixup_req {
	uint8_t seed[AP_FIXUP_SEED_MAX];
	size_t seed_len;
	uint64_t time_ns;
	char hostname[AP_HOSTNAME_MAX + 1];   /* "" when not asked */
	uint8_t machine_id[16];
	bool identity;                        /* hostname and machine_id set */
};
int ap_fixup_req_decode(const uint8_t *p, size_t len, struct ap_fixup_req *req);
void ap_fixup_req_encode(struct ap_wr *w, const struct ap_fixup_req *req);
bool ap_hostname_valid(const char *s, size_t len);
/* A fork's host name from its sandbox name: sandbox names may hold '_',
 * which host names may not (and the agent refuses), so it becomes '-';
 * at most AP_HOSTNAME_MAX bytes. */
void ap_hostname_from(const char *name, char out[AP_HOSTNAME_MAX + 1]);

struct ap_exit {
	uint8_t kind, core;
	int32_t code;
};
int ap_exit_decode(const uint8_t *p, size_t len, struct ap_exit *x);

/* Checks a relative tree path: '/'-separated, no empty, "." or ".."
 * component, no leading '/', no NUL, components of at most NAME_MAX
 * (gw_path_check).  0 or -EBADMSG.  Symlink targets are the guarded
 * writer's to judge. */
int ap_path_check(const char *path, size_t len);

/* CRC-32 (IEEE 802.3, as zlib), incremental: start with crc = 0. */
uint32_t ap_crc32(uint32_t crc, const void *buf, size_t len);

/* A bounded copy of a payload's text into buf (NUL-terminated, control
 * characters replaced) for error messages. */
void ap_text(const uint8_t *p, size_t len, char *buf, size_t bufsz);

#endif
