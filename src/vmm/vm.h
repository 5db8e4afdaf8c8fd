/* One microVM: guest memory, vCPUs, the devices of its machine (vmm/arch.h:
 * a PC's legacy devices on x86-64, GIC and PL011 on arm64), and the run
 * loop.  The CLI fills a vm_config, the VM boots, and vm_run() returns why
 * it stopped. */
#ifndef KOSA8_VM_H
#define KOSA8_VM_H

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/bus.h"
#include "hw/config.h"
#include "hw/device.h"
#include "hw/guest_mem.h"
#include "vmm/accel.h"
#include "vmm/seccomp.h"
#include "vmm/snapshot.h"
#include "vmm/vm_control.h"
#if defined(__aarch64__)
#include "vmm/arm64/machine.h"
#else
#include "vmm/x86/machine.h"
#endif

#define VM_MAX_VCPUS 254 /* xAPIC ids 0..253, the IOAPIC takes the next one */

/* virtio-mmio devices: one page each from here, in the 32-bit MMIO hole
 * (hw/guest_mem.h) on both machines; their interrupt lines are the
 * machine's (vmm/ARCH/machine.h). */
#define VM_VIRTIO_MMIO_BASE 0xd0000000ULL
#define VM_VIRTIO_MMIO_STRIDE 0x1000ULL
#define VM_DEFAULT_VSOCK_CID 3
#define VM_MAX_DEVICES 16 /* lines in the machine's device table, at most */

enum vm_stop {
	VM_STOP_NONE = 0,
	VM_STOP_POWEROFF,   /* the guest powered off (ACPI S5) */
	VM_STOP_RESET,      /* the guest rebooted (i8042 reset, triple fault) */
	VM_STOP_CRASH,      /* the accelerator could not run the guest */
	VM_STOP_HOST,       /* the host asked it to stop (signal, console escape) */
};

/* Exit statuses of the VMM process (`kosa8 vm`, documented in its --help);
 * the supervisor reads them to say why a sandbox's VM stopped. */
enum vm_exit_status {
	VM_EXIT_POWEROFF = 0,
	VM_EXIT_ERROR = 1,
	VM_EXIT_USAGE = 2,
	VM_EXIT_REBOOT = 3,
	VM_EXIT_CRASH = 4,
	VM_EXIT_HOST_STOP = 5,
	VM_EXIT_SECCOMP = VMM_SECCOMP_EXIT, /* vmm/seccomp.h */
};

/* One line for a VMM's wait status (waitpid): "exit 3: the guest
 * rebooted or its CPU reset (triple fault)", "killed by signal 9 (Killed)". */
void vm_exit_describe(int wstatus, char *buf, size_t len);


struct vm_vcpu {
	struct vm *vm;
	int id;
	struct accel_vcpu *accel;
	pthread_t thread;
	int started;
};

struct vm {
	struct vm_config cfg;
	struct accel_vm *accel;
	struct guest_mem mem;
	struct bus pio, mmio;
	/* Devices by their line in vm_devices.c's table (NULL: this VM has
	 * none of that kind), and what each was lent (hw/device.h). */
	void *devs[VM_MAX_DEVICES];
	struct device_env dev_env[VM_MAX_DEVICES];
	void *console;             /* the UART console input goes to (vmm/arch.h), or NULL */
	char err_buf[512];         /* a dynamic "why" for vm_create's caller */
	struct vm_vcpu vcpus[VM_MAX_VCPUS];
	int stop_pipe[2];          /* any thread writes a byte to wake the main loop */
	int stop_reason;           /* enum vm_stop, set once (atomic) */
	uint64_t crash_code;
	int triple_fault_vcpu;     /* 1 + the vCPU whose CPU reset itself, or 0 */
	pthread_t input_thread;
	int input_started;
	/* vCPUs wait here until the main thread has installed the seccomp
	 * filter on every thread: no guest instruction runs unfiltered. */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cond;
	int gate;                  /* 0 closed, 1 open, -1 abandoned */
	uint8_t cpu_fp[SNAP_FP_LEN];  /* hash of the CPUID the guest sees */
	struct arch_vm arch;       /* the architecture's own (vmm/ARCH/machine.h) */
	/* Pausing: vCPU threads park while pause_req is set (vm_checkpoint.c). */
	pthread_mutex_t pause_lock;
	pthread_cond_t pause_cond;
	int pause_req;
	int parked, nrunning;
	int pause_depth;           /* nested vm_pause() calls; main thread only */
	char disk_top[4096];       /* the writable delta now (moves at each checkpoint) */
	/* Incremental checkpoints: the checkpoint whose memory RAM equalled when
	 * the current dirty interval began (the last one written, or the one
	 * restored from), "" if none; a next checkpoint in the same directory
	 * is a layer over it (vmm/snapshot_mem.h). */
	char mem_parent[4096];
	uint8_t mem_parent_id[SNAP_MEM_ID_LEN];
	uint32_t mem_parent_depth;
	/* A live fork's checkpoint whose memory file is still to be written
	 * (vm_checkpoint_live_finish). */
	bool live_pending;
	char live_dir[4096];
	struct snap_memory_desc live_md;
	/* Restore: the checkpoint being loaded, until vm_create returns. */
	uint8_t *snap_buf;
	struct snapshot snap;
	/* Control socket (vm_control.c): one client at a time. */
	int control_fd, control_client;
	char control_path[108];    /* unlinked at the end (no getsockname under seccomp) */
	size_t control_len;
	char control_buf[VM_CONTROL_MAX_LINE + 1];
};

/* Builds the VM and loads the kernel.  On failure, why is a sentence for the
 * user (what is wrong and what to do); the VM is left destroyed. */
int vm_create(struct vm *vm, const struct vm_config *cfg, const char **why);
/* Runs until the guest powers off or resets, or vm_request_stop(). */
enum vm_stop vm_run(struct vm *vm);
/* Async-signal-safe: asks the VM to stop with the given reason. */
void vm_request_stop(struct vm *vm, enum vm_stop reason);
void vm_destroy(struct vm *vm);

/* Stops every vCPU (each completes its pending I/O first, so the saved
 * state is consistent) and quiesces the devices; nests.  Main thread only.
 * -ECANCELED when the VM is stopping instead. */
int vm_pause(struct vm *vm);
void vm_resume(struct vm *vm);
bool vm_paused(const struct vm *vm);

/* What a checkpoint did, for its caller to report. */
struct vm_ckpt_info {
	uint64_t memory_bytes; /* guest memory data the checkpoint holds */
	double paused_ms;      /* how long the guest did not run */
	bool layer;            /* the memory is a layer over the previous checkpoint */
	bool live;             /* memory frozen, passed, and written afterwards */
};

/* Writes a checkpoint to the directory dir (must not exist) while the VM
 * is paused, and lets it go on.  The disk's top delta is frozen into the
 * checkpoint and the VM continues on a new delta, new_top (NULL: next to
 * the old top, named after dir).  msg gets one line for the user either
 * way, *info (optional) the numbers.  Main thread only. */
int vm_checkpoint(struct vm *vm, const char *dir, const char *new_top, struct vm_ckpt_info *info,
		  char *msg, size_t msglen);
/* A checkpoint for a live fork, O(1) in guest size: RAM's memfd is frozen
 * (guest_mem_freeze) instead of written, *memfd gets it (still the VM's:
 * do not close it) for forks to map, and the directory is renamed into
 * place with its state file only.  vm_checkpoint_live_finish, called once
 * the fd is handed over, then writes the memory file from the frozen memfd
 * while the VM runs.  Until it has, the checkpoint cannot be restored from
 * disk (the loader says its memory is missing).  When RAM is a private
 * view (a template start, a restore, an earlier live fork) its data is
 * first copied into a new memfd while paused (O(data) in memory, no file
 * the forks would wait for), and that one is frozen. */
int vm_checkpoint_live(struct vm *vm, const char *dir, const char *new_top, int *memfd,
		       struct vm_ckpt_info *info, char *msg, size_t msglen);
int vm_checkpoint_live_finish(struct vm *vm);

/* The device table (vm_devices.c).  Create, pause, save and restore go in
 * its order; resume and destroy in reverse. */
int vm_devices_create(struct vm *vm, const char **why);
void vm_devices_destroy(struct vm *vm);
void vm_devices_pause(struct vm *vm);
void vm_devices_resume(struct vm *vm);
void vm_devices_save(struct vm *vm, struct snap_writer *w);
int vm_devices_restore(struct vm *vm, const struct snapshot *s, const char **why);
/* Whether the options ask for the devices the checkpoint has. */
int vm_devices_check_restore(struct vm *vm, const struct snapshot *s, const char **why);
void vm_devices_resync_irqs(struct vm *vm);
/* The kernel command-line words that declare the devices. */
int vm_devices_cmdline(struct vm *vm, char *buf, size_t len);
/* The instance of the device with these ops, or NULL. */
void *vm_device(struct vm *vm, const struct device_ops *ops);
/* The disk a device serves (checkpoints freeze it), or NULL. */
struct disk *vm_disk(struct vm *vm);

/* Restore steps, called by vm_create (vm_checkpoint.c): load and check the
 * checkpoint, then, once devices and vCPUs exist, load their state. */
int vm_restore_load(struct vm *vm, const char **why);
/* Guest RAM from the checkpoint's memory layers (vmm/snapshot_mem.h). */
int vm_restore_memory(struct vm *vm, const char **why);
int vm_restore_state(struct vm *vm, const char **why);
/* SHA-256 over a CPUID set: what a checkpoint's CPU must match. */
void vm_cpu_fingerprint(const struct cpuid_leaf *leaves, size_t n, uint8_t fp[SNAP_FP_LEN]);

/* Checks vCPUs, memory and the kernel and initrd files without touching
 * KVM, so that bad input is reported before any set-up (vm_create checks
 * the files again only as it loads them). */
int vm_check_config(const struct vm_config *cfg, const char **why);

/* Free memory the host can give a guest now (MemAvailable + SwapFree). */
int host_available_memory(uint64_t *bytes);

#endif
