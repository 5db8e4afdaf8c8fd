/* kosa8 vm: boot a kernel in a microVM (the low-level driver; the sandbox
 * commands come on top of it). */
#ifndef KOSA8_CMD_VM_H
#define KOSA8_CMD_VM_H

#include <stdbool.h>
#include <stdint.h>

#include "vmm/seccomp.h"
#include "vmm/vm.h"

enum emulate_mode { EMULATE_AUTO, EMULATE_ALWAYS, EMULATE_NEVER };

struct vm_args {
	const char *kernel, *initrd, *cmdline, *disk, *vsock;
	uint64_t cid;
	bool disk_ro;
	uint64_t mem;
	int cpus;
	enum emulate_mode emulate;
	bool help;
	const char *restore;  /* --restore DIR: run from a checkpoint */
	int restore_memfd;    /* --restore-memfd N: a live fork's memory, or -1 */
	const char *control;  /* --control PATH: pause/resume/checkpoint socket */
	const char *ckpt_dir; /* --checkpoint-dir DIR: writable in the jail */
	bool mem_set, cpus_set;
	bool no_seccomp;     /* --no-seccomp */
	bool jail;           /* --jail: vmm/jail.h */
	bool jail_probe;     /* --jail-probe: enter the jail, report what it reaches */
	bool jail_user;      /* --jail-user UID:GID (root only): end the jail as them */
	uint32_t jail_uid, jail_gid;
	bool seccomp_rules;  /* --seccomp-rules: print the table and exit */
};


/* Parses argv (argv[0] = "vm").  On error returns -EINVAL with why set to a
 * one-line message for the user. */
int vm_args_parse(int argc, char **argv, struct vm_args *a, const char **why);

/* The helper VM's script (testbed/run): $KOSA8_TESTBED, else the one of
 * this kosa8's tree or installation; -ENOENT if neither. */
int vm_find_testbed(char *buf, size_t len);

/* The VM the options ask for, checked (a restore's is checked as it loads).
 * On error returns -errno with why set. */
int vm_args_config(const struct vm_args *a, struct vm_config *cfg, const char **why);

/* Runs it: enters the jail (--jail), runs the VM to its end and returns the
 * process's exit status (VM_EXIT_*).  prog names the command in messages. */
int vm_args_run(const struct vm_args *a, struct vm_config *cfg, const char *prog);

/* Why this host's KVM cannot run kosa8's guest ("no /dev/kvm here", a
 * software KVM without vmx/svm under it), or NULL when it can: what makes
 * kosa8 vm fall back to emulation, and what kosa8 doctor reports. */

#endif
