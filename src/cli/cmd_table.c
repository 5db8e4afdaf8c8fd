/* The kosa8 command table (cmd_table.h): the one place a command, its
 * synopsis and its options are written. */
#include <string.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "vmm/vm.h"

#define END {0}

/* ---- sandboxes ---- */

#define CREATE_OPTS(rm_help) \
	{"name", 0, "NAME", "the sandbox's name (default: a random sb-XXXXXXXX)"}, \
	{"image", 0, "IMAGE", "the root filesystem: an image name (see 'kosa8 image ls') or a file (default: default)"}, \
	{"workspace", 0, "DIR", "copy DIR in as /workspace; 'kosa8 diff' and 'kosa8 export' bring changes back"}, \
	{"mem", 0, "SIZE", "guest memory, at least 64M (default 1G)"}, \
	{"cpus", 0, "N", "vCPUs, 1 to 64 (default 1)"}, \
	{"allow", 0, "HOST[:PORT]", "let the guest reach HOST (repeatable; *.example.com for subdomains)"}, \
	{"policy", 0, "FILE", "an egress policy file, copied into the sandbox (see docs/policy.md)"}, \
	{"secret", 0, "NAME", "give the guest a placeholder for secret NAME (repeatable; see 'kosa8 secret')"}, \
	{"cold", 0, NULL, "boot the guest instead of restoring the booted template (see 'kosa8 image warm')"}, \
	{"rm", 0, NULL, rm_help}

static const struct cli_opt run_opts[] = {
	CREATE_OPTS("remove the sandbox when the command ends"),
	END,
};

static const struct cli_opt create_opts[] = {
	CREATE_OPTS("accepted for the sake of scripts shared with run; create keeps the sandbox"),
	END,
};

static const struct cli_opt stop_opts[] = {
	{"time", 't', "SECONDS", "the guest gets SECONDS (default 10) to power off, then the host ends the VM; "
				 "the exit status is then 3"},
	END,
};

static const struct cli_opt raw_opts[] = {
	{"raw", 0, NULL, "print the guest's bytes as written: without it control characters and invalid UTF-8 are escaped"},
	END,
};

static const struct cli_opt rm_opts[] = {
	{NULL, 'f', NULL, "stop the sandbox first if it runs"},
	END,
};

static const struct cli_opt ps_opts[] = {
	{"json", 0, NULL, "print a JSON array (name, state, cpus, cid, mem, workspace, created)"},
	{"quiet", 'q', NULL, "print only the names, one a line"},
	END,
};

static const struct cli_opt exec_opts[] = {
	{"tty", 't', NULL, "give the command a terminal (default: when stdin and stdout are terminals)"},
	{"no-tty", 'T', NULL, "never give the command a terminal"},
	{"user", 'u', "USER", "run as USER (a name or a uid)"},
	{"workdir", 'w', "DIR", "the working directory (default /workspace)"},
	{"env", 'e', "NAME=VALUE", "set an environment variable (repeatable)"},
	END,
};

static const struct cli_opt diff_opts[] = {
	{"stat", 0, NULL, "only the changed files and their line counts"},
	END,
};

static const struct cli_opt export_opts[] = {
	{"to", 0, "DIR", "copy the sandbox's whole /workspace into DIR (new or empty)"},
	{"patch", 0, "FILE", "write the changes as a git patch to FILE (- for stdout)"},
	{"apply", 0, NULL, "apply the changes to the host workspace, after showing them"},
	{"yes", 0, NULL, "with --apply: do not ask before applying"},
	END,
};

static const struct cli_opt checkpoint_opts[] = {
	{"message", 'm', "MESSAGE", "a note kept with the checkpoint (shown by 'kosa8 checkpoints')"},
	END,
};

static const struct cli_cmd checkpoint_subs[] = {
	{"rm", "remove a checkpoint and the files only it holds", "NAME ID", NULL, NULL, NULL, NULL, -1,
	 CLI_OPERAND_SANDBOX, false},
	END,
};

static const struct cli_opt fork_opts[] = {
	{"name", 'n', "NEW", "the new sandbox's name (with --count: NEW-1, NEW-2, ...)"},
	{"count", 'c', "K", "how many sandboxes to make (default 1)"},
	END,
};

/* ---- low level ---- */

static const struct cli_opt vm_opts[] = {
	{"kernel", 0, "FILE", "x86-64 Linux bzImage (e.g. the one 'make kernel' builds)"},
	{"initrd", 0, "FILE", "initial ramdisk"},
	{"mem", 0, "SIZE", "guest memory, e.g. 512M or 2G (default 512M)"},
	{"cpus", 0, "N", "vCPUs (default 1)"},
	{"cmdline", 0, "ARGS", "appended to the kernel command line after '" VM_DEFAULT_CMDLINE "'"},
	{"disk", 0, "DELTA", "layered disk (top delta, see 'kosa8 disk') as /dev/vda"},
	{"disk-ro", 0, "DELTA", "the same, read-only"},
	{"vsock", 0, "PATH", "virtio-vsock; host side on unix sockets PATH (host to guest: connect, "
			     "send 'CONNECT <port>') and PATH_<port> (guest to host port)"},
	{"cid", 0, "N", "the guest's vsock CID (default 3)"},
	{"control", 0, "PATH", "unix socket taking one command a line: pause, resume, status, stop, "
			       "checkpoint DIR [NEWTOP], checkpoint-live DIR [NEWTOP] "
			       "(see docs/snapshot-format.md); answers 'ok ...' or 'error ...'"},
	{"restore", 0, "DIR", "run from a checkpoint instead of booting a kernel (memory and vCPUs "
			      "come from it; --disk names a new delta created over the checkpoint's disk, "
			      "or one already made over it)"},
	{"restore-memfd", 0, "N", "with --restore: guest memory is open file N (the fd a "
				  "'checkpoint-live' answer passed), not DIR's memory file"},
	{"checkpoint-dir", 0, "DIR", "with --jail: the one directory the jailed VMM may write "
				     "checkpoints and new disk deltas to"},
	{"emulate", 0, NULL, "run in a helper VM under software emulation (slow; for hosts without "
			     "/dev/kvm; automatic there, with a warning)"},
	{"no-emulate", 0, NULL, "fail instead when /dev/kvm is missing"},
	{"jail", 0, NULL, "run the VMM in its own namespaces with an empty root that holds only "
			  "these files, no network, no capabilities"},
	{"jail-user", 0, "UID:GID", "as root, with --jail: end the jail as this user and group, and "
				    "no other group (see docs/vmm-security.md)"},
	{"jail-probe", 0, NULL, "enter the jail, print what it reaches, and exit (for tests)"},
	{"no-seccomp", 0, NULL, "do not filter the VMM's system calls (debugging only)"},
	{"seccomp-rules", 0, NULL, "print the system calls the VMM may make, and why"},
	END,
};

static const struct cli_opt disk_create_opts[] = {
	{"base", 0, "IMAGE", "the image or frozen delta the new delta lies over"},
	{"size", 0, "SIZE", "without --base: the size of a new all-zero disk, e.g. 10G"},
	{"cluster", 0, "SIZE", "the delta's cluster size, e.g. 64K"},
	END,
};

static const struct cli_cmd disk_subs[] = {
	{"create", "a new empty top delta over --base, or an all-zero disk of --size",
	 "DELTA (--base IMAGE | --size SIZE) [--cluster SIZE]", NULL, disk_create_opts, NULL, NULL, -1,
	 CLI_OPERAND_FILE, false},
	{"info", "a disk's size and number of layers", "DELTA", NULL, NULL, NULL, NULL, -1, CLI_OPERAND_FILE, false},
	{"freeze", "make a delta read-only for ever, so that others can be created over it", "DELTA", NULL,
	 NULL, NULL, NULL, -1, CLI_OPERAND_FILE, false},
	END,
};

/* ---- audit ---- */

static const struct cli_opt audit_opts[] = {
	{"log", 0, "PATH", "the log (default: $KOSA8_AUDIT_LOG, else <state dir>/audit.log)"},
	END,
};
#define PUBKEY_OPT {"pubkey", 0, "KEY", "the trusted public key: PEM file or 64 hex digits (default: your own)"}

static const struct cli_opt audit_show_opts[] = {
	{"sandbox", 0, "NAME", "only records of this sandbox"},
	{"type", 0, "TYPE", "only records of this type"},
	{"since", 0, "TIME", "only records from TIME: 2026-12-02T09:00:00Z, @UNIXSECONDS, or an age such as 30s, 15m, 2h, 7d"},
	{"until", 0, "TIME", "only records up to TIME"},
	{"follow", 'f', NULL, "keep printing records as they are written"},
	{"json", 0, NULL, "one JSON object a line"},
	{"raw", 0, NULL, "print details as written: without it control characters, bidi overrides and invalid UTF-8 are escaped"},
	END,
};

static const struct cli_opt audit_verify_opts[] = {
	PUBKEY_OPT,
	{"trusted-keys", 0, "FILE", "trust the keys in FILE (default: $KOSA8_AUDIT_TRUSTED_KEYS, else <config dir>/audit/trusted-keys)"},
	{"head", 0, "FILE", "the log must still extend the signed head saved in FILE (by consistency proof)"},
	{"bundle", 0, "FILE", "verify an exported bundle instead of the log"},
	END,
};

static const struct cli_opt audit_prove_opts[] = {
	{"size", 0, "N", "against the signed head of tree size N (default: the newest)"},
	PUBKEY_OPT,
	{"output", 'o', "FILE", "write the proof to FILE, made 0600, never overwritten (default: stdout)"},
	END,
};

static const struct cli_opt audit_pubkey_opts[] = {PUBKEY_OPT, END};

static const struct cli_opt audit_consistency_opts[] = {
	PUBKEY_OPT,
	{"json", 0, NULL, "print the proof as JSON"},
	END,
};

static const struct cli_opt audit_export_opts[] = {
	{"output", 'o', "FILE", "write the bundle to FILE (default: stdout)"},
	END,
};

static const struct cli_opt audit_append_opts[] = {
	{"type", 0, "TYPE", "the record's type (required)"},
	{"sandbox", 0, "NAME", "the sandbox it is about"},
	{"actor", 0, "ACTOR", "who did it (default: you)"},
	{"details", 0, "JSON", "a JSON object with the details"},
	END,
};

static const struct cli_opt oci_opts[] = {
	{"root", 0, "DIR", "the containers' state (default /run/kosa8-oci)"},
	{"log", 0, "LOGFILE", "errors and warnings, one line each"},
	{"log-format", 0, "FORMAT", "json or text (default)"},
	{"debug", 0, NULL, "accepted for runc's callers; ignored"},
	{"systemd-cgroup", 0, NULL, "accepted; ignored with a warning: a container's limits are its VM's size"},
	{"rootless", 0, "VALUE", "accepted for runc's callers; ignored"},
	{"criu", 0, "PATH", "accepted for runc's callers; ignored"},
	END,
};

static const struct cli_opt oci_create_opts[] = {
	{"bundle", 'b', "DIR", "the bundle (config.json and the rootfs; default .)"},
	{"pid-file", 0, "FILE", "where the container's pid goes (its monitor)"},
	{"console-socket", 0, "SOCKET", "with process.terminal: where the pty master is sent"},
	{"no-pivot", 0, NULL, "accepted; the VM has its own root"},
	{"no-new-keyring", 0, NULL, "accepted; the VM has its own keyrings"},
	{"preserve-fds", 0, "N", "only 0: no descriptor reaches a VM"},
	END,
};

static const struct cli_opt oci_exec_opts[] = {
	{"process", 'p', "FILE", "the process (runtime-spec process object) to run (required)"},
	{"detach", 'd', NULL, "return once it started; its pid goes to --pid-file"},
	{"pid-file", 0, "FILE", "where the pid of the process's stand-in goes"},
	{"console-socket", 0, "SOCKET", "with process.terminal: where the pty master is sent"},
	END,
};

static const struct cli_opt oci_kill_opts[] = {
	{"all", 'a', NULL, "every process of the container (its VM's: the same)"},
	END,
};

static const struct cli_opt oci_delete_opts[] = {
	{"force", 'f', NULL, "a running container too (its VM is stopped)"},
	END,
};

static const struct cli_cmd oci_subs[] = {
	{"create", "make the container's sandbox and root; the process waits for start", "[OPTIONS] ID", NULL,
	 oci_create_opts, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"start", "run the container's process", "ID", NULL, NULL, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"state", "print runc's state object", "ID", NULL, NULL, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"exec", "run another process in a running container", "--process FILE [OPTIONS] ID", NULL,
	 oci_exec_opts, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"kill", "send a signal to the container's process", "[--all] ID [SIGNAL]", NULL, oci_kill_opts, NULL,
	 NULL, -1, CLI_OPERAND_NONE, false},
	{"delete", "remove a stopped container", "[--force] ID", NULL, oci_delete_opts, NULL, NULL, -1,
	 CLI_OPERAND_NONE, false},
	{"features", "print runc's features object", "", NULL, NULL, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{0},
};

static const struct cli_cmd audit_subs[] = {
	{"show", "print records", "[OPTIONS]", NULL, audit_show_opts, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"verify", "recompute the chain and the Merkle tree and check every signed head",
	 "[--pubkey KEY] [--trusted-keys FILE] [--head FILE] [--bundle FILE]",
	 "On failure it names the first bad record and what happened to it.  The trusted key is --pubkey, "
	 "else the keys in the trusted-keys file, else your own signing key, which pins nothing: verify then "
	 "says it checked integrity only.  Exit status: 0 ok, 1 verification failed, 2 usage or system error.", audit_verify_opts, NULL,
	 NULL, -1, CLI_OPERAND_NONE, false},
	{"prove", "an inclusion proof (JSON) of record SEQ against a signed head", "SEQ [--size N] [--pubkey KEY] [-o FILE]",
	 NULL, audit_prove_opts, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"check-proof", "check an inclusion proof offline", "FILE [--pubkey KEY]", NULL, audit_pubkey_opts, NULL,
	 NULL, -1, CLI_OPERAND_FILE, false},
	{"consistency", "prove the signed head OLD is a prefix of NEW", "OLD NEW [--pubkey KEY] [--json]",
	 "OLD and NEW are each a head's tree size, 'latest', or a file holding a head line.",
	 audit_consistency_opts, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"export", "a bundle (records, heads, public key) for offline verify", "[-o FILE]", NULL,
	 audit_export_opts, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"append", "add a record (for scripts and tests); prints its number",
	 "--type TYPE [--sandbox NAME] [--actor ACTOR] [--details JSON]", NULL, audit_append_opts, NULL, NULL,
	 -1, CLI_OPERAND_NONE, false},
	{"sign", "sign a head over every record now (as a sandbox stop does)", "", NULL, NULL, NULL, NULL, -1,
	 CLI_OPERAND_NONE, false},
	{"head", "print the newest signed head line", "", NULL, NULL, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"pubkey", "print the public key that signs heads (PEM)", "", NULL, NULL, NULL, NULL, -1,
	 CLI_OPERAND_NONE, false},
	END,
};

/* ---- images, secrets, policy, approvals ---- */

static const struct cli_opt image_build_opts[] = {
	{"agent", 0, "PATH", "the kosa8-agent to put in the image (default: the one built with this kosa8)"},
	END,
};

static const struct cli_opt json_opts[] = {
	{"json", 0, NULL, "print JSON"},
	END,
};

static const struct cli_opt warm_opts[] = {
	{"cpus", 0, "N", "vCPUs, 1 to 64 (default 1)"},
	{"mem", 0, "SIZE", "guest memory, at least 64M (default 1G)"},
	END,
};

static const struct cli_opt prune_opts[] = {
	{"all", 0, NULL, "remove every template no sandbox stands on"},
	END,
};

static const struct cli_opt image_export_opts[] = {
	{"sha256-file", 0, NULL, "also write FILE.sha256 (sha256sum's format) for 'kosa8 image import'"},
	END,
};

static const struct cli_opt image_import_opts[] = {
	{"name", 0, "NAME", "the name to import it as (default: the one in its manifest)"},
	{"sha256", 0, "HEX", "the archive's SHA-256 as its publisher lists it; a mismatch imports nothing"},
	{"no-verify", 0, NULL, "import without any checksum (a URL is refused otherwise when it has none)"},
	{"force", 0, NULL, "replace an image of the same name and key (sandboxes on it would not start again)"},
	END,
};

static const struct cli_cmd image_subs[] = {
	{"build", "build the image a recipe describes, once, into the cache (root: mmdebstrap)",
	 "[--agent PATH] [RECIPE|NAME]",
	 "RECIPE is a file, NAME a recipe in ~/.config/kosa8/images/ or guest/image/ (default: default).",
	 image_build_opts, NULL, NULL, -1, CLI_OPERAND_FILE, false},
	{"ls", "list built images: name, key, size on disk, virtual size, date", "[--json]", NULL, json_opts,
	 NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"path", "print the newest built image of NAME (default: default)", "[NAME]", NULL, NULL, NULL, NULL, -1,
	 CLI_OPERAND_NONE, false},
	{"rm", "remove every build of NAME, or the one with KEY", "NAME[/KEY]",
	 "Sandboxes whose disk sits on a removed image cannot start any more.", NULL, NULL, NULL, -1,
	 CLI_OPERAND_NONE, false},
	{"warm", "make the booted template new sandboxes of IMAGE restore, ahead of time", "[IMAGE] [--cpus N] [--mem SIZE]",
	 "run and create make it on first use otherwise; one per image, kernel, kosa8, vCPUs and memory.",
	 warm_opts, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"export", "write an image to one archive file (sparse, zstd) and print its SHA-256",
	 "NAME[/KEY] FILE [--sha256-file]",
	 "NAME is the image 'kosa8 run --image NAME' boots; NAME/KEY one build (see 'kosa8 image ls'). "
	 "The archive holds the disk, its manifest, recipe and identity; FILE is written whole or not at all.",
	 image_export_opts, NULL, NULL, -1, CLI_OPERAND_FILE, false},
	{"import", "add an image from an archive file or URL (http, https, file) to the cache",
	 "SOURCE [--name NAME] [--sha256 HEX | --no-verify] [--force]",
	 "The archive's SHA-256 is checked against --sha256, else against SOURCE.sha256 when there is one; "
	 "a URL with neither is refused unless --no-verify. The archive is checked as untrusted (only an "
	 "image's files, no links or paths) and the image appears whole or not at all. "
	 "KOSA8_IMAGE_SOURCE=PATH-or-URL (with KOSA8_IMAGE_SHA256=HEX, or none) makes run and create "
	 "import the default image from there when it is missing.",
	 image_import_opts, NULL, NULL, -1, CLI_OPERAND_FILE, false},
	{"prune", "remove templates whose kernel, image or kosa8 changed or is gone", "[--all]",
	 "A template a sandbox stands on (its disk lies over it) is kept and named.", prune_opts, NULL, NULL,
	 -1, CLI_OPERAND_NONE, false},
	END,
};

static const struct cli_opt secret_add_opts[] = {
	{"host", 0, "HOST[:PORT]", "a host and port the secret may be sent to, 443 when no port is given (repeatable, at least one)"},
	{"header", 0, "FIELD", "set this request header to --format rather than replace the placeholder"},
	{"format", 0, "FORMAT", "with --header: the header's value, {} being the secret (e.g. 'Bearer {}')"},
	{"from-env", 0, "VAR", "read the value from this host environment variable when a sandbox starts"},
	{"force", 0, NULL, "replace a secret of the same name"},
	END,
};

static const struct cli_cmd secret_subs[] = {
	{"add", "add a secret; the value is read from stdin (without echo on a terminal)",
	 "NAME --host HOST[:PORT] [--host ...] [--header FIELD [--format FORMAT]] [--from-env VAR] [--force]",
	 NULL, secret_add_opts, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"ls", "list secrets: name, value source, header, hosts", "", NULL, NULL, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	{"rm", "remove a secret", "NAME", NULL, NULL, NULL, NULL, -1, CLI_OPERAND_NONE, false},
	END,
};

static const struct cli_opt policy_opts[] = {
	{"sandbox", 0, "NAME", "the policy of this sandbox (default: the user's defaults)"},
	END,
};

static const struct cli_cmd policy_subs[] = {
	{"show", "print the effective policy", "[--sandbox NAME]", NULL, NULL, NULL, NULL, -1,
	 CLI_OPERAND_NONE, false},
	{"check", "what the policy says about HOST: exit 0 allow, 1 deny, 3 ask",
	 "HOST[:PORT] [--sandbox NAME]", "PORT left out: any port, as DNS asks.", NULL, NULL, NULL, -1,
	 CLI_OPERAND_NONE, false},
	END,
};

static const struct cli_opt approvals_watch_opts[] = {
	{"count", 0, "N", "stop after answering N requests"},
	END,
};

#define ANSWER(verb, what) \
	{verb, what, "NAME ID", NULL, NULL, NULL, NULL, -1, CLI_OPERAND_SANDBOX, false}

static const struct cli_cmd approvals_subs[] = {
	ANSWER("allow", "allow a waiting request this once (the name may be reached for a minute)"),
	ANSWER("always", "allow it and add an allow rule to the running sandbox's policy"),
	ANSWER("deny", "refuse a waiting request"),
	{"watch", "ask on this terminal about requests as they come", "[NAME] [--count N]", NULL,
	 approvals_watch_opts, NULL, NULL, -1, CLI_OPERAND_SANDBOX, false},
	END,
};

static const struct cli_opt ui_opts[] = {
	{"port", 0, "PORT", "listen on PORT (default: a free one)"},
	{"listen", 0, "ADDR", "127.0.0.1 (the default) or localhost: there is no TLS, so nothing wider is accepted"},
	{"no-notify", 0, NULL, "do not put new approval requests on the desktop (notify-send)"},
	END,
};

/* ---- the helper machine ---- */

static const struct cli_cmd machine_subs[] = {
	{"start", "boot the helper machine (the first sandbox command does it too)", "", NULL, NULL, NULL, NULL,
	 -1, CLI_OPERAND_NONE, false},
	{"stop", "power the helper machine off; sandboxes running in it stop", "", NULL, NULL, NULL, NULL, -1,
	 CLI_OPERAND_NONE, false},
	{"status", "whether it runs (exit 0) or not (exit 3), its QEMU pid and logs", "", NULL, NULL, NULL,
	 NULL, -1, CLI_OPERAND_NONE, false},
	{"rm", "stop it and remove its directory (sandboxes and the audit log stay)", "", NULL, NULL, NULL,
	 NULL, -1, CLI_OPERAND_NONE, false},
	END,
};

/* ---- kosa8 itself ---- */

static const struct cli_opt help_opts[] = {
	{"man", 0, NULL, "print the command's man page (roff) instead; without COMMAND, kosa8(1)"},
	{"commands", 0, NULL, "list the commands' names, one a line"},
	END,
};

static const struct cli_opt doctor_opts[] = {
	{"json", 0, NULL, "print the checks as JSON: ready, and per check its status, what was found and the fix"},
	END,
};

/* Before COMMAND (main.c parses them). */
const struct cli_opt cli_global_opts[] = {
	{"verbose", 'v', NULL, "say more on stderr (-vv: debugging detail)"},
	{"version", 0, NULL, "print the version, the commit it was built from and the build, and exit"},
	{"help", 'h', NULL, "this help"},
	{"no-emulate", 0, NULL, "where KVM cannot run the guests, refuse sandbox commands instead of running them in "
				"the helper machine (also KOSA8_NO_EMULATE=1)"},
	{0},
};

const struct cli_cmd cli_commands[] = {
	{"run", "run a command in a new sandbox", "[OPTIONS] [--] COMMAND [ARG...]",
	 "Creates a sandbox, starts it, runs COMMAND in it with this terminal, and stops it; "
	 "the exit status is COMMAND's (125: kosa8 failed, 126: not runnable, 127: not found).",
	 run_opts, NULL, cmd_run, 0, CLI_OPERAND_COMMAND, false},
	{"create", "create a sandbox (disk over an image, workspace to copy in)", "[OPTIONS]",
	 "Prints the new sandbox's name.", create_opts, NULL, cmd_create, -1, CLI_OPERAND_NONE, false},
	{"start", "boot a sandbox; it keeps running after this command exits", "NAME", NULL, NULL, NULL,
	 cmd_start, -1, CLI_OPERAND_SANDBOX, false},
	{"stop", "power a sandbox off; after a grace period the host ends it", "[-t SECONDS] NAME", NULL, stop_opts, NULL, cmd_stop, -1, CLI_OPERAND_SANDBOX, false},
	{"rm", "remove a stopped sandbox", "[-f] NAME", NULL, rm_opts, NULL, cmd_rm, -1, CLI_OPERAND_SANDBOX,
	 false},
	{"ps", "list sandboxes", "[--json | -q]", NULL, ps_opts, NULL, cmd_ps, -1, CLI_OPERAND_NONE, false},
	{"exec", "run a command in a running sandbox", "[OPTIONS] NAME [--] COMMAND [ARG...]", NULL, exec_opts,
	 NULL, cmd_exec, 1, CLI_OPERAND_SANDBOX, false},
	{"shell", "an interactive shell in a running sandbox", "NAME", NULL, NULL, NULL, cmd_shell, -1,
	 CLI_OPERAND_SANDBOX, false},
	{"cp", "copy files between a sandbox and the host", "NAME:PATH HOSTDIR\nHOSTPATH NAME:DIR",
	 "Exactly one side is NAME:PATH, a path in sandbox NAME.", NULL, NULL, cmd_cp, -1,
	 CLI_OPERAND_SANDBOX, false},
	{"diff", "the changes under a sandbox's /workspace, as a patch against the host folder",
	 "NAME [--stat]",
	 "A git patch (binary files, deletions, modes) against the host folder the sandbox was created from.",
	 diff_opts, NULL, cmd_diff, -1, CLI_OPERAND_SANDBOX, false},
	{"export", "bring /workspace changes back to the host", "NAME (--to DIR | --patch FILE | --apply [--yes])",
	 NULL, export_opts, NULL, cmd_export, -1, CLI_OPERAND_SANDBOX, false},
	{"logs", "a sandbox's console output (the last 2 MiB)", "[--raw] NAME", NULL, raw_opts, NULL, cmd_logs, -1, CLI_OPERAND_SANDBOX, false},
	{"checkpoint", "checkpoint a running sandbox; prints the checkpoint's id", "NAME [-m MESSAGE]\nrm NAME ID",
	 NULL, checkpoint_opts, checkpoint_subs, cmd_checkpoint, -1, CLI_OPERAND_SANDBOX, false},
	{"checkpoints", "a sandbox's checkpoint tree: ids, times, parents, sizes", "NAME", NULL, NULL, NULL,
	 cmd_checkpoints, -1, CLI_OPERAND_SANDBOX, false},
	{"rewind", "put a running sandbox back to a checkpoint", "NAME ID", NULL, NULL, NULL, cmd_rewind, -1,
	 CLI_OPERAND_SANDBOX, false},
	{"fork", "new running sandboxes from a checkpoint", "NAME [ID] --name NEW [--count K]",
	 "Without ID: from a checkpoint of the running sandbox NAME taken now, live.", fork_opts, NULL,
	 cmd_fork, -1, CLI_OPERAND_SANDBOX, false},
	{"vm", "boot a kernel in a microVM (low level)",
	 "--kernel FILE [--initrd FILE] [--mem SIZE] [--cpus N] [--cmdline ARGS] [OPTIONS]\n"
	 "--restore DIR [--disk NEW.k8d] [--vsock PATH] [OPTIONS]",
	 "The console is on this terminal; there Ctrl-A x stops the VM. Exit status: 0 guest powered off, "
	 "3 guest rebooted, 4 guest crashed or could not run, 5 stopped from the host, 6 killed by its "
	 "seccomp filter, 1 error, 2 usage error.",
	 vm_opts, NULL, cmd_vm, -1, CLI_OPERAND_NONE, false},
	{"disk", "create and inspect layered copy-on-write disks (low level)", "COMMAND ...",
	 "A disk is a chain: a read-only base image, frozen deltas, and a writable top delta.", NULL,
	 disk_subs, cmd_disk, -1, CLI_OPERAND_NONE, false},
	{"vmctl", "send a command to a VM's control socket (low level)", "SOCKET COMMAND [ARG...]",
	 "Sends COMMAND to the VMM listening on SOCKET (kosa8 vm --control) and prints its one-line answer. "
	 "Commands: pause, resume, status, stop, checkpoint DIR [NEWTOP]. Exit status: 0 answer 'ok ...', "
	 "1 answer 'error ...' or no answer, 2 usage.",
	 NULL, NULL, cmd_vmctl, -1, CLI_OPERAND_FILE, false},
	{"audit", "show, verify and prove the tamper-evident audit log", "[--log PATH] COMMAND [OPTIONS]",
	 "Exit status: 0 ok, 1 verification failed, 2 usage or system error.", audit_opts, audit_subs,
	 cmd_audit, -1, CLI_OPERAND_NONE, false},
	{"image", "build, import, export, list and remove Debian root filesystem images", "COMMAND ...", NULL, NULL, image_subs,
	 cmd_image, -1, CLI_OPERAND_NONE, false},
	{"secret", "API keys the egress proxy adds for the guest (never in the VM)", "COMMAND ...",
	 "A sandbox run with --secret NAME sees NAME=<placeholder>; the egress proxy puts the real value in "
	 "place of the placeholder in request headers sent over TLS to the secret's hosts and ports only. Secrets are "
	 "stored under the kosa8 config folder, mode 0600.",
	 NULL, secret_subs, cmd_secret, -1, CLI_OPERAND_NONE, false},
	{"policy", "show a sandbox's egress policy, check HOST[:PORT] against it", "COMMAND [--sandbox NAME]",
	 "The policy is <config>/policy (the user's defaults) with the sandbox's own <state>/sandboxes/NAME/policy "
	 "over it; see docs/policy.md.  A rule without a port allows ports 443 and 80 only (a deny: every port).",
	 policy_opts, policy_subs, cmd_policy, -1, CLI_OPERAND_NONE, false},
	{"approvals", "list and answer network requests waiting for approval", "[NAME]\nCOMMAND ...",
	 "Without a command: list the requests waiting in NAME (default: every running sandbox). "
	 "Unanswered requests are denied after a timeout.",
	 NULL, approvals_subs, cmd_approvals, -1, CLI_OPERAND_SANDBOX, false},
	{"ui", "a local web console: sandboxes, approvals, egress and the audit log", "[--port PORT] [--listen 127.0.0.1] [--no-notify]", "Serves on 127.0.0.1 and prints an address with a secret token; see docs/console.md.", ui_opts, NULL, cmd_ui, -1, CLI_OPERAND_NONE, false},
	{"machine", "the helper machine that runs sandboxes where KVM cannot (QEMU, software emulation)",
	 "start|stop|status|rm",
	 "Where /dev/kvm is missing or cannot run kosa8's guests (a software KVM such as kvm-pvm, a cloud VM "
	 "without nested virtualization), every sandbox command runs in one persistent helper machine under "
	 "QEMU, started by the first of them and reused by the rest. It sees this host's files as they are "
	 "(state, config, workspaces) and runs the commands as you; see docs/machine.md. --no-emulate (before "
	 "the command) or KOSA8_NO_EMULATE=1 refuses instead.",
	 NULL, machine_subs, cmd_machine, -1, CLI_OPERAND_NONE, false},
	{"doctor", "what this host can do for kosa8, and what to fix", "[--json]",
	 "Checks KVM (hardware, software or none, and its permissions), the emulation fallback, cgroup v2, "
	 "user namespaces, disk space, the guest kernel and image, and the audit key. Each line says ok, warn "
	 "or FAIL, and how to fix it. Exit status: 0 this host can run sandboxes, 1 it cannot yet, 2 usage.",
	 doctor_opts, NULL, cmd_doctor, -1, CLI_OPERAND_NONE, false},
	{"help", "help on a command", "[--man] [COMMAND [SUBCOMMAND]]", NULL, help_opts, NULL, cmd_help, -1,
	 CLI_OPERAND_NONE, false},
	{"version", "the version, the commit it was built from, and the build", "", NULL, NULL, NULL, cmd_version,
	 -1, CLI_OPERAND_NONE, false},
	{"completion", "a completion script for bash, zsh or fish", "bash|zsh|fish",
	 "For bash: 'source <(kosa8 completion bash)' in ~/.bashrc, or save it as "
	 "~/.local/share/bash-completion/completions/kosa8.",
	 NULL, NULL, cmd_completion, -1, CLI_OPERAND_NONE, false},
	{"oci", "an OCI runtime with runc's command line, for containerd and Docker",
	 "[--root DIR] [--log LOGFILE] [--log-format json|text] COMMAND ...",
	 "Each container is one sandbox; a link named kosa8-runc to kosa8 takes the same words without "
	 "'oci'. See docs/kubernetes.md.",
	 oci_opts, oci_subs, cmd_oci, -1, CLI_OPERAND_NONE, false},
	{"__supervise", "the sandbox supervisor (started by kosa8 start)", "NAME FD [MEMFD]", NULL, NULL, NULL,
	 cmd_supervise, -1, CLI_OPERAND_NONE, true},
	{"__template", "a template's supervisor (started by kosa8 run, create, image warm)", "DIR FD", NULL,
	 NULL, NULL, cmd_template, -1, CLI_OPERAND_NONE, true},
	{"__machine-serve", "the helper machine's command server (started by its init)", "DIR UID GID RUNDIR",
	 NULL, NULL, NULL, cmd_machine_serve, -1, CLI_OPERAND_NONE, true},
	{"__ui-state", "the web console's view of the sandboxes, as JSON lines (kosa8 ui runs it)",
	 "[SECONDS]", NULL, NULL, NULL, cmd_ui_state, -1, CLI_OPERAND_NONE, true},
	{"__image-from-source", "the default image imported from $KOSA8_IMAGE_SOURCE (kosa8 run and create run it)",
	 "CMD NAME", NULL, NULL, NULL, cmd_image_from_source, -1, CLI_OPERAND_NONE, true},
	END,
};

const struct cli_cmd *cli_find(const struct cli_cmd *list, const char *name)
{
	for (; list && list->name; list++)
		if (!strcmp(list->name, name))
			return list;
	return NULL;
}

static const struct cli_opt *opt_in(const struct cli_opt *o, const char *arg)
{
	size_t n;

	if (!o)
		return NULL;
	if (arg[0] == '-' && arg[1] == '-') {
		n = strcspn(arg + 2, "=");
		for (; o->help; o++)
			if (o->name && strlen(o->name) == n && !strncmp(o->name, arg + 2, n))
				return o;
	} else if (arg[0] == '-' && arg[1] && !arg[2]) {
		for (; o->help; o++)
			if (o->shrt == arg[1])
				return o;
	}
	return NULL;
}

const struct cli_opt *cli_find_opt(const struct cli_cmd *parent, const struct cli_cmd *cmd,
				   const char *arg)
{
	const struct cli_opt *o = opt_in(cmd->opts, arg);

	return o || !parent ? o : opt_in(parent->opts, arg);
}

bool cli_wants_help(const struct cli_cmd *cmd, int argc, char **argv, const struct cli_cmd **sub)
{
	const struct cli_cmd *cur = cmd;
	int operands = 0;

	*sub = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const struct cli_opt *o;

		if (!strcmp(a, "--"))
			return false;
		if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			return true;
		if (a[0] == '-' && a[1]) {
			o = cli_find_opt(*sub ? cmd : NULL, cur, a);
			/* Its argument is not an option, whatever it looks like. */
			if (o && o->arg && !strchr(a, '='))
				i++;
			continue;
		}
		if (operands == 0 && !*sub && cmd->subs && (*sub = cli_find(cmd->subs, a))) {
			cur = *sub;
			continue;
		}
		if (cur->guest_argv_at >= 0 && operands == cur->guest_argv_at)
			return false;
		operands++;
	}
	return false;
}

const char *cli_unlisted_opt(const struct cli_cmd *parent, const struct cli_cmd *sub, int argc,
			     char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const struct cli_opt *o = NULL;
		char one[3] = "-";

		if (!strcmp(a, "--"))
			return NULL;
		if (a[0] != '-' || !a[1])
			continue;
		if (a[1] == '-') {
			if (!(o = cli_find_opt(parent, sub, a)))
				return a;
			if (o->arg && !strchr(a, '='))
				i++;
			continue;
		}
		/* -fo FILE, -oFILE: letters up to the first that takes an argument. */
		for (const char *c = a + 1; *c; c++) {
			one[1] = *c;
			if (!(o = cli_find_opt(parent, sub, one)))
				return a;
			if (o->arg) {
				i += !c[1];
				break;
			}
		}
	}
	return NULL;
}
