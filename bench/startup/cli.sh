#!/usr/bin/env bash
# bench/startup/cli.sh [RUNS]: how long one kosa8 command takes to start and
# end, side by side with the container CLIs a user would otherwise run
# (Debian's runc, ctr and docker, unpacked by scripts/oci-tools.sh), in one
# hyperfine run.  Every kosa8 command, and each sandbox's supervisor, pays
# this: the process's loading and the command's own work.
#
#   KOSA8=path          the kosa8 under test (default build/kosa8)
#   KOSA8_BEFORE=path   another kosa8 to compare with (e.g. a build of an
#                       older commit: git worktree add /tmp/old COMMIT &&
#                       make -C /tmp/old build/kosa8)
#
# Commands: `--version` (loading and nothing else) and `ps` on an empty
# state directory (loading, the command table, reading the state).  Peers:
# `runc --version`, `ctr --version`, `docker --version` (no daemon).
# Needs hyperfine (make deps).  Results: bench/results/startup.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-200}
k=${KOSA8:-build/kosa8}
[ -x "$k" ] || { echo "no $k: run make" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "hyperfine is missing: make deps" >&2; exit 1; }
scripts/oci-tools.sh >&2 || echo "no peers: scripts/oci-tools.sh failed" >&2
tree=${KOSA8_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kosa8}/oci-tools/tree
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
export KOSA8_STATE_DIR=$state/state XDG_RUNTIME_DIR=$state/run KOSA8_MACHINE=never
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
cmds=(-n "kosa8 --version" "$k --version" -n "kosa8 ps" "$k ps")
if [ -n "${KOSA8_BEFORE:-}" ]; then
	cmds+=(-n "before: kosa8 --version" "$KOSA8_BEFORE --version" -n "before: kosa8 ps" "$KOSA8_BEFORE ps")
fi
for p in usr/sbin/runc usr/bin/ctr usr/bin/docker; do
	[ -n "$tree" ] && [ -x "$tree/$p" ] && cmds+=(-n "${p##*/} --version" "$tree/$p --version")
done
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; $(uname -r)"
hyperfine -N --warmup 20 --runs "$runs" --export-markdown "$state/table.md" "${cmds[@]}" >&2
cat "$state/table.md"
echo "shared objects mapped: kosa8 $(ldd "$k" | wc -l)${KOSA8_BEFORE:+, before $(ldd "$KOSA8_BEFORE" | wc -l)}"
