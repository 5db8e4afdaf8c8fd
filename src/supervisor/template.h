/* Templates: a guest booted to a ready agent and checkpointed, which new
 * sandboxes restore instead of booting (docs/architecture.md, Walk 1).
 *
 *   <kosa8 state>/templates/          0700, the user's alone (private_dir)
 *     KEY.lock                        held (flock) while KEY is made
 *     KEY/                            laid out as a sandbox's state dir
 *       sandbox.json                  what it was booted with
 *       disk.k8d                      its disk delta, frozen by checkpoint c1
 *       checkpoints/c1/state, memory  the booted guest (read-only files)
 *       ckmeta/c1.json, current.json  as for any checkpoint
 *       ckmeta/c1.forks/NAME          a sandbox that stands on it
 *       template.json                 written last: the template is whole
 *
 * KEY is the SHA-256 (hex) of everything the booted guest's state depends
 * on: the kernel's and the kosa8 binary's contents, the image's identity
 * (disk_base_id: SHA-256 of its content, which holds the guest agent), the
 * vCPUs, the memory, the kernel command line and the snapshot format.  A
 * changed input gives another key, so a stale template is never used; it
 * stays until `kosa8 image prune`.  A directory without template.json is
 * half-made (its maker failed or was killed) and is never used: the next
 * maker, holding KEY.lock, removes it first. */
#ifndef KOSA8_SANDBOX_TEMPLATE_H
#define KOSA8_SANDBOX_TEMPLATE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TEMPLATE_KEY_LEN 64      /* hex characters */
#define TEMPLATE_DIR "templates"
#define TEMPLATE_FILE "template.json"
#define TEMPLATE_CKPT "c1"
/* The template's name as a sandbox (its hostname until a restored guest
 * takes its own): "tpl-" and the key's first 12 characters. */
#define TEMPLATE_NAME_LEN 17

/* The guest kernel's command line, for every boot; %s the hostname. */
#define SANDBOX_CMDLINE_FMT                                                                  \
	"root=/dev/vda rw rootfstype=ext4 init=/usr/sbin/kosa8-agent kosa8.hostname=%s "     \
	"kosa8.net=on quiet"

struct template_inputs {
	const char *kernel; /* bzImage */
	const char *image;  /* base image (ext4) */
	const char *exe;    /* the kosa8 binary that runs the VMM */
	uint64_t mem;
	int cpus;
};

/* What the key is computed from, as one line per input (the first
 * argument's hashes already made): for tests and `image prune`. */
int template_key_text(const struct template_inputs *in, const uint8_t kernel_sha[32],
		      const uint8_t image_id[16], const uint8_t exe_sha[32], char *buf, size_t len);
/* The key of in: hashes the kernel and the binary, reads the image's
 * identity.  0, or -errno with err naming the input that failed. */
int template_key(const struct template_inputs *in, char key[TEMPLATE_KEY_LEN + 1], char *err,
		 size_t errlen);
bool template_key_valid(const char *key);
void template_name(const char *key, char name[TEMPLATE_NAME_LEN]);

/* <state>/templates, checked private (made with create).  0 or -errno, why. */
int template_root(char *buf, size_t len, bool create, char *why, size_t wlen);

/* Takes KEY.lock in root, waiting for another maker (*waited set when it
 * had to).  The descriptor holds it; -errno. */
int template_lock(const char *root, const char *key, bool *waited);

/* Whether root/KEY is a whole template that may be used: a private
 * directory, template.json naming KEY, the checkpoint's files present,
 * regular, and writable by nobody.  0; -ENOENT when absent or half-made;
 * other -errno with why. */
int template_check(const char *root, const char *key, char *why, size_t wlen);

/* After the maker's VMM has ended: makes the checkpoint's files and the
 * frozen disk read-only (as root: root's, readable by the VMMs' group),
 * then writes template.json.  0 or -errno with why. */
int template_seal(const char *root, const char *key, const struct template_inputs *in,
		  char *why, size_t wlen);

/* template.json's text (a file on disk: bounded, type-checked; fuzzed by
 * fuzz/fuzz_template.c): key must match; kernel and image are absolute
 * paths shorter than PATH_MAX.  0 or -EBADMSG. */
int template_parse(const char *text, size_t len, const char *key, char *kernel, char *image,
		   uint64_t *mem, int *cpus);
/* template.json of root/KEY: its inputs (paths into kernel and image, of
 * PATH_MAX bytes).  0, -ENOENT, -EBADMSG. */
int template_load(const char *root, const char *key, char *kernel, char *image, uint64_t *mem,
		  int *cpus);

#endif
