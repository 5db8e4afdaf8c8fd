#!/usr/bin/env bash
# Many sandboxes at once from one template, against as many --cold ones:
# start time of the last one and host memory.
#
#   testbed/run bench/templates/concurrent.sh [N] [N_COLD]   (default 20 20)
#
# Runs where /dev/kvm works (testbed/run: directly, or in the helper VM;
# on the shared build machine through /work/notes/vmrun).  Needs `make` and
# `make kernel initramfs image`; run it as root (the helper's CMD is):
# the jailed VMMs' /proc/PID/smaps are not readable by their user.  In the
# helper give it room: TESTBED_MEM=8192 (N guests of 128 MiB plus their
# VMMs and supervisors).  N_COLD=0 skips the cold half.
#
# Steps, in a fresh KOSA8_STATE_DIR: `kosa8 image warm --cpus 1 --mem 128M`;
# then for the template and then for --cold: N `kosa8 create --mem 128M`
# side by side; N `kosa8 start NAME && kosa8 exec NAME -- true` side by side,
# timed from their common launch; the memory sample below right after the
# last exec answered and again SETTLE seconds later (default 30); then N
# `kosa8 rm -f` side by side and a last MemAvailable.
#
# Memory sample: processes named kosa8-vmm (the VMMs) and those run as
# `kosa8 __supervise` (the supervisors): the sum of their PSS
# (/proc/PID/smaps_rollup, shared pages divided among the processes mapping
# them); for the VMMs also the guest-RAM mapping alone (/proc/PID/smaps: the
# template's memory file, found by inode, or the cold VM's memfd): its PSS,
# its pages shared with other processes (Shared_*), its copies made on write
# (Anonymous), and the rest: pages of the file or memfd only this VMM maps
# (on tmpfs those count as Private_Dirty, not _Clean); and
# MemAvailable from /proc/meminfo.  Markdown on stdout, progress on stderr.
set -u
cd "$(dirname "$0")/../.." || exit 1
n=${1:-20}
ncold=${2:-$n}
settle=${SETTLE:-30}
mem=128M
export KOSA8_KERNEL=${KOSA8_KERNEL:-$(guest/kernel/build.sh --path)}
# N boots at once on an emulated machine can outlast the 300 s default.
export KOSA8_BOOT_TIMEOUT=${KOSA8_BOOT_TIMEOUT:-1200}
KOSA8_STATE_DIR=$(mktemp -d) || exit 1
export KOSA8_STATE_DIR
W=$KOSA8_STATE_DIR/bench
mkdir -p "$W"
trap 'rm -rf "$KOSA8_STATE_DIR"' EXIT
k8() { timeout -k 5 1500 build/kosa8 "$@" </dev/null; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "concurrent: $(date +%T) $*" >&2; }
avail() { awk '/^MemAvailable:/ { print $2 }' /proc/meminfo; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# PIDs of the VMMs, of the supervisors.
vmm_pids() { local p; for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = kosa8-vmm ] && echo "${p#/proc/}"; done; }
sup_pids() {
	local p
	for p in /proc/[0-9]*; do
		[ "$({ tr '\0' '\n' <"$p/cmdline"; } 2>/dev/null | sed -n 2p)" = __supervise ] && echo "${p#/proc/}"
	done
}

# One line of kB sums: nvmm vmm_pss vmm_rss nsup sup_pss ram_rss ram_pss
# ram_shared ram_only_here ram_anon memavailable.  $1: the template's
# memory file inode (0: none).
sample() {
	local ino=$1 p vp sp
	vp=$(vmm_pids); sp=$(sup_pids)
	{
		for p in $vp; do
			awk '/^Pss:/ { pss = $2 } /^Rss:/ { rss = $2 } END { print "V", pss + 0, rss + 0 }' "/proc/$p/smaps_rollup"
			awk -v ino="$ino" '
				/^[0-9a-f]+-[0-9a-f]+ / { ram = (ino != 0 && $5 == ino) || $6 ~ /kosa8-guest-ram/; next }
				ram && /^Rss:/ { r += $2 } ram && /^Pss:/ { ps += $2 }
				ram && /^Shared_(Clean|Dirty):/ { sh += $2 } ram && /^Anonymous:/ { an += $2 }
				END { print "R", r + 0, ps + 0, sh + 0, r - sh - an, an + 0 }' "/proc/$p/smaps"
		done
		for p in $sp; do
			awk '/^Pss:/ { print "S", $2 }' "/proc/$p/smaps_rollup"
		done
	} 2>/dev/null | awk -v av="$(avail)" '
		$1 == "V" { nv++; vp += $2; vr += $3 }
		$1 == "R" { rr += $2; rp += $3; rs += $4; rc += $5; ra += $6 }
		$1 == "S" { ns++; sp += $2 }
		END { print nv + 0, vp + 0, vr + 0, ns + 0, sp + 0, rr + 0, rp + 0, rs + 0, rc + 0, ra + 0, av }'
}

# phase KIND COUNT INODE: creates, starts, samples and removes COUNT
# sandboxes (KIND tpl or cold); results into $W/KIND.*.
phase() {
	local kind=$1 count=$2 ino=$3 i t0 t1 flag=
	[ "$kind" = cold ] && flag=--cold
	say "$kind: MemAvailable $(mib "$(avail)") MiB before; creating $count"
	avail >"$W/$kind.avail0"
	t0=$(now)
	for i in $(seq "$count"); do
		k8 create --name "$kind$i" --mem $mem $flag >/dev/null 2>"$W/$kind$i.create.err" &
	done
	wait
	t1=$(now)
	secs "$t0" "$t1" >"$W/$kind.create"
	say "$kind: created in $(cat "$W/$kind.create") s; starting $count at once"
	: >"$W/$kind.times"
	t0=$(now)
	for i in $(seq "$count"); do
		(
			k8 start "$kind$i" 2>"$W/$kind$i.start.err"; a=$?; ta=$(now); b=-1
			if [ $a -eq 0 ]; then k8 exec "$kind$i" -- true 2>"$W/$kind$i.exec.err"; b=$?; fi
			echo "$kind$i $a $b $(secs "$t0" "$ta") $(secs "$t0" "$(now)")" >>"$W/$kind.times"
		) &
	done
	wait
	t1=$(now)
	sample "$ino" >"$W/$kind.mem0"
	awk '$3 == 0 { printf "%.1f\n", $5 }' "$W/$kind.times" | sort -n >"$W/$kind.answered"
	# How each started: the VMM's "restore ms:" line is in the console log
	# of a sandbox restored from a checkpoint, here the template's.
	grep -l "restore ms:" "$KOSA8_STATE_DIR"/sandboxes/"$kind"*/console.log 2>/dev/null | wc -l >"$W/$kind.restored"
	say "$kind: all returned after $(secs "$t0" "$t1") s; $(awk '$3 == 0' "$W/$kind.times" | wc -l) of $count answered exec"
	for i in $(seq "$count"); do
		grep -q "^$kind$i 0 0 " "$W/$kind.times" && continue
		say "$kind$i failed: $(grep "^$kind$i " "$W/$kind.times")"
		cat "$W/$kind$i".*.err >&2 2>/dev/null
		break
	done
	sleep "$settle"
	sample "$ino" >"$W/$kind.mem1"
	cat /proc/loadavg >"$W/$kind.load"
	t0=$(now)
	for i in $(seq "$count"); do k8 rm -f "$kind$i" >/dev/null 2>&1 & done
	wait
	secs "$t0" "$(now)" >"$W/$kind.rm"
	sleep 2
	avail >"$W/$kind.avail2"
	say "$kind: removed in $(cat "$W/$kind.rm") s; $(vmm_pids | wc -w) VMMs left; MemAvailable $(mib "$(cat "$W/$kind.avail2")") MiB"
	# The raw numbers now, in case a later step never ends.
	say "$kind raw: answered $(tr '\n' ' ' <"$W/$kind.answered")"
	say "$kind raw: mem0 $(cat "$W/$kind.mem0"); mem1 $(cat "$W/$kind.mem1"); avail0 $(cat "$W/$kind.avail0")"
}

say "warming the template (--cpus 1 --mem $mem)"
t0=$(now)
tpl=$(k8 image warm --cpus 1 --mem $mem 2>"$W/warm.err") || { cat "$W/warm.err" >&2; exit 1; }
warm=$(secs "$t0" "$(now)")
memfile=${tpl#* }/checkpoints/c1/memory
ino=$(stat -c %i "$memfile") || exit 1
filesz=$(stat -c %s "$memfile"); fileblk=$(stat -c %b "$memfile")
say "template ${tpl%% *} in $warm s; memory file $(mib $((filesz / 1024))) MiB, $(mib $((fileblk / 2))) MiB allocated ($(stat -f -c %T "$memfile"))"

phase tpl "$n" "$ino"
[ "$ncold" -gt 0 ] && phase cold "$ncold" 0

# The table: one column per kind that ran.  A cell function takes the
# kind (tpl or cold); S is the sample (mem0 or mem1) the memory rows read.
kinds="tpl"; [ "$ncold" -gt 0 ] && kinds="tpl cold"
row() { local label=$1 k out=; shift; for k in $kinds; do out="$out $("$@" "$k") |"; done; echo "| $label |$out"; }
head_row() { local k out=; for k in $kinds; do out="$out |"; done; echo "| **$1** |$out"; }
val() { cat "$W/$2.$1"; }
ok_of() { echo "$(awk '$3 == 0' "$W/$1.times" | wc -l) of $(wc -l <"$W/$1.times")"; }
last_of() { tail -1 "$W/$1.answered"; }
first_med() { awk '{ v[NR] = $1 } END { printf "%s / %s", v[1], v[int((NR + 1) / 2)] }' "$W/$1.answered"; }
start_max() { awk '{ printf "%.1f\n", $4 }' "$W/$1.times" | sort -n | tail -1; }
# Field I of sample S in MiB; with "each", also divided by field J's count.
fld() { awk -v i="$1" '{ printf "%.1f", $i / 1024 }' "$W/$2.$S"; }
fld_each() { awk -v i="$1" -v j="$2" '{ printf "%.1f (%.1f)", $i / 1024, $j ? $i / 1024 / $j : 0 }' "$W/$3.$S"; }
counts() { awk '{ print $1 " / " $4 }' "$W/$1.$S"; }
ram() { echo "$(fld 6 "$1") / $(fld 7 "$1")"; }
drop() { awk -v a="$(cat "$W/$1.avail0")" '{ printf "%.1f (%.1f)", (a - $11) / 1024, $1 ? (a - $11) / 1024 / $1 : 0 }' "$W/$1.$S"; }
avail_rm() { echo "$(mib "$(cat "$W/$1.avail0")") / $(mib "$(cat "$W/$1.avail2")")"; }

where="the helper VM (testbed/run), nested KVM"; [ -n "${TESTBED_INSIDE:-}" ] || where="this host, /dev/kvm"
echo "Ran in $where: $(nproc) vCPUs, $(awk '/^MemTotal:/ { printf "%d MiB", $2 / 1024 }' /proc/meminfo);" \
	"load average at the first sample $(cut -d' ' -f1-3 "$W/tpl.load")."
echo "Template: \`kosa8 image warm --cpus 1 --mem $mem\` $warm s; its memory file" \
	"$(mib $((filesz / 1024))) MiB, $(mib $((fileblk / 2))) MiB allocated ($(stat -f -c %T "$memfile"))."
echo
echo "| | $n from the template |$([ "$ncold" -gt 0 ] && echo " $ncold --cold |")"
echo "|---|---|$([ "$ncold" -gt 0 ] && echo '---|')"
row "answered \`exec -- true\`" ok_of
row "restored from a checkpoint (\"restore ms:\" in console.log)" val restored
row "\`create\` of all, side by side, s" val create
row "launch of all \`start\`s to the last \`exec -- true\` answered, s" last_of
row "first / median answered, s" first_med
row "last \`start\` returned, s" start_max
for S in mem0 mem1; do
	if [ $S = mem0 ]; then head_row "memory when the last answered"; else head_row "memory $settle s later"; fi
	row "VMMs / supervisors running" counts
	row "kosa8-vmm: sum of PSS, MiB (each)" fld_each 2 1
	row "kosa8-vmm: sum of RSS, MiB" fld 3
	row "supervisors: sum of PSS, MiB (each)" fld_each 5 4
	row "guest RAM mapping: sum of RSS / PSS, MiB" ram
	row "... pages shared with another process (Shared_*), MiB" fld 8
	row "... file pages only one VMM maps (RSS - Shared - Anonymous), MiB" fld 9
	row "... copies made on write (Anonymous), MiB (each)" fld_each 10 1
	row "MemAvailable drop since before \`create\`, MiB (each)" drop
done
head_row "after \`rm -f\` of all"
row "\`rm -f\` of all, side by side, s" val rm
row "MemAvailable before \`create\` / after \`rm\`, MiB" avail_rm
