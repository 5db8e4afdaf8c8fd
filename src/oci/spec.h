/* An OCI bundle's config.json (runtime-spec 1.x), reduced to what kosa8
 * runs: the process, hostname, the root filesystem, the VM's size from
 * linux.resources, the mounts kosa8 can give, and kosa8's annotations.
 *
 * The file is written by whoever builds the bundle (Docker, containerd, a
 * pod's author through them), so the parser is small and bounded: the file
 * at most OCI_SPEC_MAX bytes, every field it reads type-checked, every
 * count and length capped; fields it does not know are ignored, as runc
 * ignores them.  A field kosa8 cannot honour (a bind mount of a host
 * directory) is refused with a message naming it, never dropped quietly.
 * docs/kubernetes.md has the table of what is supported. */
#ifndef KOSA8_OCI_SPEC_H
#define KOSA8_OCI_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OCI_SPEC_MAX (1024 * 1024)
#define OCI_ARGS_MAX 1024
#define OCI_ENV_MAX 1024
/* argv and env travel to the guest in one agent frame (64 KiB). */
#define OCI_ARGV_ENV_BYTES (48 * 1024)
#define OCI_PATH_LEN 4096
#define OCI_HOSTNAME_LEN 64
#define OCI_MOUNTS_MAX 64
#define OCI_OPTS_LEN 256
#define OCI_ANNOT_MAX 64
#define OCI_ANNOT_KEY_LEN 256
#define OCI_ANNOT_VAL_LEN 4096
#define OCI_ALLOW_MAX 32
#define OCI_ALLOW_LEN 272
#define OCI_SECRETS_MAX 16
#define OCI_SECRET_LEN 65
#define OCI_POLICY_LEN 64

#define OCI_CPUS_MAX 64
#define OCI_MEM_MIN (256ULL << 20)
#define OCI_MEM_MAX (64ULL << 30)
#define OCI_MEM_STEP (128ULL << 20)
#define OCI_MEM_DEFAULT (1024ULL << 20)

enum oci_mount_kind {
	OCI_MOUNT_GUEST,    /* a kernel file system mounted in the guest (proc, tmpfs...) */
	OCI_MOUNT_FILE,     /* a small host file bound onto a file: its bytes copied in */
	OCI_MOUNT_DNS,      /* /etc/resolv.conf: kosa8's own (the host DNS of the sandbox) */
};

struct oci_mount {
	enum oci_mount_kind kind;
	char dest[OCI_PATH_LEN];
	char type[32];
	char source[OCI_PATH_LEN];
	char options[OCI_OPTS_LEN];   /* comma-joined, for mount -o */
};

struct oci_annotation {
	char *key, *value;
};

struct oci_spec {
	char *args[OCI_ARGS_MAX + 1];
	int nargs;
	char *env[OCI_ENV_MAX + 1];
	int nenv;
	char cwd[OCI_PATH_LEN];
	uint32_t uid, gid;
	bool terminal;
	char hostname[OCI_HOSTNAME_LEN];
	char root[OCI_PATH_LEN];       /* as written: relative to the bundle, or absolute */
	bool root_readonly;
	int cpus;                      /* vCPUs (see oci_spec_parse) */
	uint64_t mem;                  /* guest memory, bytes */
	struct oci_mount mounts[OCI_MOUNTS_MAX];
	int nmounts;
	struct oci_annotation annotations[OCI_ANNOT_MAX];
	int nannotations;
	/* From io.kosa8.allow (comma-separated rules), io.kosa8.secret
	 * (comma-separated names), io.kosa8.policy (a policy's name). */
	char allow[OCI_ALLOW_MAX][OCI_ALLOW_LEN];
	int nallow;
	char secrets[OCI_SECRETS_MAX][OCI_SECRET_LEN];
	int nsecrets;
	char policy[OCI_POLICY_LEN];
};

/* Parses len bytes of config.json into *s (zeroed first; free it with
 * oci_spec_free even on failure).  0, or -EINVAL / -E2BIG / -ENOTSUP with
 * err saying which field and why.
 *
 * Sizes: vCPUs = ceil(cpu.quota / cpu.period) when a quota is set (the
 * limit), else ceil(cpu.shares / 1024) (Kubernetes writes requests as
 * 1024 shares per CPU), else 1; at most OCI_CPUS_MAX.  Guest memory =
 * memory.limit rounded up to a multiple of 128 MiB, at least 256 MiB (the
 * guest kernel and agent live in it too), at most 64 GiB; 1 GiB without a
 * limit.  A larger request is refused rather than cut. */
int oci_spec_parse(const char *buf, size_t len, struct oci_spec *s, char *err, size_t errsz);
/* The process object alone (what `exec --process FILE` gets from the
 * shim): args, env, cwd, user and terminal into *s, with the same bounds
 * and errors ("process.args ..."); the rest of *s keeps its defaults. */
int oci_process_parse(const char *buf, size_t len, struct oci_spec *s, char *err, size_t errsz);
void oci_spec_free(struct oci_spec *s);
/* The value of annotation key, or NULL. */
const char *oci_spec_annotation(const struct oci_spec *s, const char *key);

#endif
