/* Starting the VMM process: PID 1 of a PID namespace of its own.
 *
 * The VMM then sees no other process, so even a signal its filter let
 * through could reach nothing else.  The jail makes the VMM's other
 * namespaces itself (vmm/jail.h), but a PID namespace must exist before its
 * first process, and an unshare in the VMM would stop it making threads;
 * so the supervisor creates it with the child.
 *
 * As a user a PID namespace needs a user namespace as well: the child gets
 * one mapping only the user (the jail nests its own inside), with the maps
 * written from outside by vmm_clone_map_user before the child goes on. */
#ifndef KOSA8_SUPERVISOR_VMM_CLONE_H
#define KOSA8_SUPERVISOR_VMM_CLONE_H

#include <stdbool.h>
#include <sys/types.h>

/* fork(), but the child is PID 1 of a new PID namespace; *userns says
 * whether it is in a new user namespace too (then call
 * vmm_clone_map_user before letting it run on).  Where the kernel refuses
 * (no PID or user namespaces for this user), a plain fork and a warning.
 * With cgroup_fd (a cgroup v2 directory, or -1) the child starts in that
 * cgroup (CLONE_INTO_CGROUP) and *in_cgroup says so: moving a running
 * process there instead waits for an RCU grace period, 10-60 ms on a
 * loaded host.  Otherwise the caller moves it (vmm_cgroup_add). */
pid_t vmm_clone(bool *userns, int cgroup_fd, bool *in_cgroup);

/* Maps the caller's uid and gid, and nothing else, into the user
 * namespace of child pid.  0 or -errno. */
int vmm_clone_map_user(pid_t pid);

#endif
