/* Small helpers shared by every part of kosa8.
 *
 * Error convention, everywhere in the tree: a function that can fail returns
 * 0 (or a non-negative count) on success and a negative errno on failure, and
 * cleans up after itself through a single exit path.  Only set-up code in a
 * command's main path may print and exit; nothing a guest controls may. */
#ifndef KOSA8_UTIL_H
#define KOSA8_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/fileio.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define KiB (1024ULL)
#define MiB (1024ULL * KiB)
#define GiB (1024ULL * MiB)

#define ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))

/* Parses "512M", "2G", "131072K" or a plain byte count.  Returns 0 or -EINVAL
 * (malformed) / -ERANGE (overflows 64 bits). */
int parse_size(const char *s, uint64_t *out);

/* Adds one to an eventfd's counter, waking whoever polls it.  A counter
 * at its maximum (EAGAIN) already means a wake-up is pending: 0 then too.
 * Returns 0 or -errno. */
int eventfd_ring(int fd);

/* Maps uid and gid, and nothing else, into the user namespace of the
 * process whose /proc directory is proc ("/proc/self", "/proc/1234"):
 * setgroups denied first, as an unprivileged writer must.  0 or -errno. */
int userns_map_one(const char *proc, unsigned uid, unsigned gid);

/* The user's cache directory for kosa8: $KOSA8_CACHE_DIR, else
 * $XDG_CACHE_HOME/kosa8, else ~/.cache/kosa8.  Writes into buf. */
int kosa8_cache_dir(char *buf, size_t len);
/* Same for configuration: $KOSA8_CONFIG_DIR, $XDG_CONFIG_HOME/kosa8, ~/.config/kosa8. */
int kosa8_config_dir(char *buf, size_t len);
/* Same for state (sandboxes, logs): $KOSA8_STATE_DIR, $XDG_STATE_HOME/kosa8,
 * ~/.local/state/kosa8. */
int kosa8_state_dir(char *buf, size_t len);

/* Finds a file that ships with kosa8 (a script such as testbed/run):
 * <dir of the kosa8 binary>/../REL in a checkout, or .../lib/kosa8/REL when
 * installed.  -ENOENT if neither exists. */
int kosa8_data_path(const char *rel, char *buf, size_t len);

/* The guests' architecture, which is this build's (KVM runs its own): the
 * builders' --arch (guest/kernel/build.sh, guest/image/build.sh) and the
 * kernel file that ships with kosa8. */
#if defined(__aarch64__)
#define KOSA8_ARCH "arm64"
#define KOSA8_KERNEL_FILE "Image"
#else
#define KOSA8_ARCH "x86_64"
#define KOSA8_KERNEL_FILE "bzImage"
#endif

/* The guest kernel that ships with kosa8: KOSA8_KERNEL_FILE installed as
 * <prefix>/lib/kosa8/KOSA8_KERNEL_FILE (a release, packaging/), else the
 * one the build tree's guest/kernel/build.sh cached for KOSA8_ARCH ("make
 * kernel", "make kernel-arm64").  -ENOENT when there is neither. */
int kosa8_guest_kernel(char *buf, size_t len);

/* A program that goes with the kosa8 binary exe: file next to it (a build
 * tree), else <exe's dir>/../lib/kosa8/file (installed).  -ENOENT when
 * neither is executable.  kosa8_vmm_path: the VMM, KOSA8_VMM_FILE;
 * KOSA8_TOOLS_FILE runs the commands that need heavy libraries
 * (src/cli/tools.c). */
#define KOSA8_VMM_FILE "kosa8-vmm"
#define KOSA8_TOOLS_FILE "kosa8-tools"
/* Set by kosa8 for kosa8-tools: the kosa8 binary that handed it the
 * command, for the commands it runs in turn (src/ui/run.c). */
#define KOSA8_CLI_ENV "KOSA8_CLI"
int kosa8_helper_path(const char *exe, const char *file, char *buf, size_t len);
int kosa8_vmm_path(const char *exe, char *buf, size_t len);

/* Sets $KOSA8_AGENT, unless it is set, to the guest agent installed with
 * kosa8 (<prefix>/lib/kosa8/kosa8-agent), for guest/image/build.sh: it
 * keys an image by its agent, so looking one up must name the agent that
 * built it.  In a build tree there is none and the builder takes
 * build/kosa8-agent as before. */
void kosa8_use_installed_agent(void);

/* Runs a command and reads the last line it prints (the scripts' convention
 * for "the path of what I built"), its stderr silenced; -EIO if it fails. */
int run_for_last_line(const char *const argv[], char *buf, size_t len);
/* The same with its stderr left on ours (its progress and errors). */
int run_for_last_line_shown(const char *const argv[], char *buf, size_t len);
/* The same, its whole output into buf (NUL-terminated): -E2BIG if it
 * does not fit. */
int run_for_output(const char *const argv[], char *buf, size_t len);

/* Reaps the child pid once it ends, within timeout_ms: woken by its
 * pidfd when it ends, not by a poll's next turn.  0 (*status its wait
 * status), -ETIMEDOUT, or -errno. */
int wait_child_ms(pid_t pid, int *status, int timeout_ms);

/* Waits until path exists (made in its folder: inotify), the child pid
 * ends (its pidfd; not reaped), or timeout_ms pass.  0 when path exists,
 * -ETIMEDOUT otherwise (the child's end is the caller's to check). */
int wait_created_ms(const char *path, pid_t pid, int timeout_ms);

/* CLOCK_MONOTONIC in nanoseconds, and in milliseconds. */
uint64_t mono_ns(void);
uint64_t mono_ms(void);

/* Marks this process as holding secrets (secret values, the audit key, a
 * CA key): not dumpable (PR_SET_DUMPABLE 0), so a crash writes no core
 * file and processes of the same user cannot ptrace it or read its memory
 * through /proc.  Every loader of such a key calls it, before the key is
 * in memory; execve() ends it for the program that follows.  0 or -errno. */
int process_hold_secrets(void);

/* A directory of kosa8's that only this user may use (run and state
 * directories, issue 23 item 8): with create, made 0700 when missing; then
 * it must be a directory, not a symbolic link, owned by the effective uid,
 * with no access for group or others.  0, or -errno with why (for the
 * user: which directory, what is wrong, what to do). */
int private_dir(const char *path, bool create, char *why, size_t len);

/* rename(2) that never replaces an existing to (RENAME_NOREPLACE).  On a
 * filesystem that lacks the flag (9p, which the helper machine's state
 * directory is on: docs/machine.md) it checks that to does not exist,
 * then renames: callers use it only for names that no one else creates.
 * 0 or -errno (-EEXIST when to exists). */
int rename_noreplace(const char *from, const char *to);

/* fsync(2) of the folder holding path: makes a create, link or rename there
 * durable.  0 or -errno. */
int sync_dir_of(const char *path);

/* The value of one hex digit (either case), or -1.  Inline: the response
 * redactor calls it for every byte twice (OPENSSL_hexchar2int, a call
 * each time, cost it 10-15%). */
static inline int hex_digit(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Little-endian fields of kosa8's file formats, whatever the host's order. */
static inline void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
	put_le32(p, (uint32_t)v);
	put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t get_le64(const uint8_t *p)
{
	return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

#endif
