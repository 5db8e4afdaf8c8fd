/* What a VM is asked to be: filled by `kosa8 vm` (cli/cmd_vm.c), read by
 * the VMM and by each device as the VMM creates it (hw/device.h). */
#ifndef KOSA8_HW_CONFIG_H
#define KOSA8_HW_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

struct vm_config {
	const char *kernel_path;
	const char *initrd_path;   /* may be NULL */
	const char *cmdline;       /* appended to VM_DEFAULT_CMDLINE; may be NULL */
	uint64_t mem_size;
	int ncpus;
	int console_in;            /* -1: no console input */
	int console_out;
	int console_escape;        /* Ctrl-A x stops the VM (interactive terminals) */
	const char *disk_path;     /* top delta of a layered disk (virtio-blk), or NULL */
	bool disk_read_only;
	const char *vsock_uds;     /* host side of virtio-vsock (unix socket path), or NULL */
	uint64_t vsock_cid;        /* the guest's vsock address, 3 or more */
	bool seccomp;              /* filter system calls once set-up is over (vmm/seccomp.h) */
	/* Restore: boot from this checkpoint directory instead of a kernel.
	 * mem_size and ncpus then come from the checkpoint, and disk_path names
	 * a new delta to create over the checkpoint's frozen disk. */
	const char *restore_dir;
	/* With restore_dir: RAM is this fd (a live fork's frozen memfd, mapped
	 * privately), not the checkpoint's memory file. */
	bool has_restore_memfd;
	int restore_memfd;
	const char *control_path;  /* unix socket for pause/resume/checkpoint, or NULL */
};

#endif
