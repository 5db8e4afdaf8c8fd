# The sandbox groups that need nothing of the host but the kosa8 CLI, its
# state and workspace files: no look at the VMM's or supervisor's
# processes (pgrep, kill), no servers on the host's loopback, no other
# user.  tests/vm/run-all runs them in a helper VM; tests/machine/sandboxes
# runs the same functions on a host without usable KVM, every command
# through `kosa8 machine` (tests/run's "all" runs them there, once).
# Sourced after tests/vm/lib.sh (sb, ok, not_ok, g, timed, $WORK).

. tests/vm/sandbox-basic.sh
. tests/vm/sandbox-template.sh
. tests/vm/workspace-export.sh
. tests/vm/sandbox-checkpoint.sh
. tests/vm/checkpoint-fail.sh
. tests/vm/sandbox-io.sh
. tests/vm/image-import.sh

# The basic groups: run, the life of a sandbox with cp both ways, the
# CLI's errors, diff/export back to the host, four at once, a sandbox on
# an exported and imported image (in the helper machine about 7 min on a
# loaded build machine).
sandbox_groups_basic() {
	g test_sandbox_run sandbox-run
	g test_sandbox_lifecycle sandbox-lifecycle
	timed sandbox-bad-input test_sandbox_bad_input
	timed workspace-export-errors test_workspace_export_errors
	g test_workspace_export workspace-export
	g test_sandbox_four sandbox-four-at-once
	g test_sandbox_imported_image sandbox-imported-image
}

# Templates, checkpoints, rewind, forks and a checkpoint on a full disk:
# each writes guest memory files, which in the helper machine cross 9p to
# the host (there about 4x the basic groups' time).
sandbox_groups_checkpoint() {
	ONCE_MORE_TRIES=3 g test_sandbox_template sandbox-template
	timed sandbox-checkpoint-errors test_sandbox_checkpoint_errors
	ONCE_MORE_TRIES=3 g test_sandbox_checkpoint sandbox-checkpoint
	ONCE_MORE_TRIES=3 g test_sandbox_fork_live sandbox-fork-live
	g test_checkpoint_fail sandbox-checkpoint-fails-full-disk
}

# sandbox_groups_run WHICH: basic, checkpoint or all.
sandbox_groups_run() {
	case $1 in
	basic) sandbox_groups_basic ;;
	checkpoint) sandbox_groups_checkpoint ;;
	all) sandbox_groups_basic; sandbox_groups_checkpoint ;;
	*) not_ok sandbox-groups "unknown set '$1' (basic, checkpoint or all)" ;;
	esac
}
