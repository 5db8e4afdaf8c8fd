# Templates (sourced by tests/vm/run-all and tests/vm/sandbox-template-only):
# `kosa8 image warm` makes one with progress, run restores it and says so,
# --cold boots; two siblings of one template differ in boot_id, random
# bytes, machine-id and hostname, their kernels reseeded on the restore,
# and one's memory is not seen by the other; the template's memory file is
# the same after they ran; checkpoint, fork and rewind of a
# template-started sandbox work and each gets a new boot_id, two forks of
# one checkpoint differ like siblings; a live fork of one is live, a
# second one waits for a file; another --mem makes another
# template; two runs that need the same missing one share it (one makes
# it, the other waits); prune removes a template whose kernel is gone.
#
# Uses run-all's WORK, ok, not_ok.  Its own state directory.

tp_sb() { KOSA8_STATE_DIR=$WORK/tpstate timeout -k 5 600 build/kosa8 "$@" </dev/null; }
tp_in() { tp_sb exec "$1" -- sh -c "$2" 2>>"$WORK/out"; }
tp_root() { tp_sb exec -u root "$1" -- sh -c "$2" 2>>"$WORK/out"; }
tp_fail() { not_ok "$1" "$2"; tp_clear; }
# Twice: a parent is refused while its fork exists.
tp_clear() {
	local i
	for i in 1 2; do
		tp_sb ps 2>/dev/null | awk 'NR > 1 {print $1}' | while read -r n; do tp_sb rm -f "$n" >/dev/null 2>&1; done
	done
}
TP_MEM=384M
# A guest's identity, one a line: boot_id, 32 bytes of /dev/urandom, machine-id.
TP_IDENTITY='cat /proc/sys/kernel/random/boot_id; head -c 32 /dev/urandom | od -An -tx1 | tr -d " \n"; echo; cat /etc/machine-id'
# tp_differ TEST A B N: lines 1..N of A and B are all set and all differ.
tp_differ() {
	local f x y
	for f in $(seq 1 "$4"); do
		x=$(echo "$2" | sed -n ${f}p); y=$(echo "$3" | sed -n ${f}p)
		[ -n "$x" ] && [ "$x" != "$y" ] ||
			{ tp_fail "$1" "line $f (boot_id, urandom, machine-id, hostname) is the same: '$x'"; return 1; }
	done
}

# The one template dir whose sandbox.json says mem bytes.
tp_dir_of() {
	local d
	for d in "$WORK"/tpstate/templates/*/; do
		[ -f "$d/template.json" ] && grep -q "\"mem\":[[:space:]]*$1\b" "$d/template.json" && { echo "${d%/}"; return 0; }
	done
	return 1
}

test_sandbox_template() {
	local name t0 dir sum0 sum1 a b f rc
	rm -rf "$WORK/tpstate"
	: >"$WORK/out"

	name=sandbox-template-warm-progress
	tp_sb image warm --mem $TP_MEM >"$WORK/warm.out" 2>"$WORK/warm.err"; rc=$?
	sed 's/^/  /' "$WORK/warm.err"
	[ $rc -eq 0 ] || { tp_fail $name "image warm failed ($rc)"; return 1; }
	grep -q "making the template" "$WORK/warm.err" && grep -q "booting the guest" "$WORK/warm.err" &&
		grep -q "checkpointing" "$WORK/warm.err" && grep -q "template made in" "$WORK/warm.err" ||
		{ tp_fail $name "warm showed no progress"; return 1; }
	dir=$(tp_dir_of $((384 * 1024 * 1024))) || { tp_fail $name "no whole template after warm"; return 1; }
	[ "$(stat -c %a "$WORK/tpstate/templates")" = 700 ] || { tp_fail $name "templates/ is not 0700"; return 1; }
	for f in checkpoints/c1/memory checkpoints/c1/state disk.k8d; do
		[ -w "$dir/$f" ] && [ "$(id -u)" != 0 ] && { tp_fail $name "$f is writable"; return 1; }
		case $(stat -c %a "$dir/$f") in 400|440) ;; *) tp_fail $name "$f has mode $(stat -c %a "$dir/$f")"; return 1 ;; esac
	done
	sum0=$(sha256sum <"$dir/checkpoints/c1/memory")
	ok $name

	name=sandbox-template-run-and-cold
	t0=$(date +%s%N)
	[ "$(tp_sb run --rm --mem $TP_MEM -- echo hi 2>"$WORK/run.err")" = hi ] ||
		{ sed 's/^/  /' "$WORK/run.err"; tp_fail $name "run from the template failed"; return 1; }
	echo "  run from the template: $(( ($(date +%s%N) - t0) / 1000000 )) ms; $(cat "$WORK/run.err")"
	grep -q "restored from template tpl-" "$WORK/run.err" || { tp_fail $name "run does not say it restored"; return 1; }
	grep -q "making the template" "$WORK/run.err" && { tp_fail $name "run made a template warm made already"; return 1; }
	t0=$(date +%s%N)
	[ "$(tp_sb run --rm --cold --mem $TP_MEM -- echo hi 2>"$WORK/run.err")" = hi ] ||
		{ sed 's/^/  /' "$WORK/run.err"; tp_fail $name "--cold run failed"; return 1; }
	echo "  cold run: $(( ($(date +%s%N) - t0) / 1000000 )) ms; $(cat "$WORK/run.err")"
	grep -q "booted (--cold)" "$WORK/run.err" || { tp_fail $name "--cold run does not say it booted"; return 1; }
	ok $name

	name=sandbox-template-siblings-differ
	for f in tpa tpb; do
		tp_sb create --name $f --mem $TP_MEM >/dev/null 2>>"$WORK/out" && tp_sb start $f 2>>"$WORK/out" ||
			{ tp_fail $name "create/start $f failed"; return 1; }
	done
	a=$(tp_in tpa "$TP_IDENTITY; hostname")
	b=$(tp_in tpb "$TP_IDENTITY; hostname")
	echo "  tpa: $(echo $a)"; echo "  tpb: $(echo $b)"
	tp_differ $name "$a" "$b" 4 || return 1
	[ "$(echo "$a" | sed -n 4p)" = tpa ] || { tp_fail $name "tpa's hostname is '$(echo "$a" | sed -n 4p)'"; return 1; }
	ok $name

	# The guest kernel heard of the new generation ID (devices/vmgenid.c)
	# and reseeded itself: no agent involved (tests/vm/vmgenid.sh shows
	# the keys differ before any guest code runs).
	name=sandbox-template-kernel-reseeds-on-restore
	for f in tpa tpb; do
		tp_root $f 'dmesg' | grep -q 'crng reseeded due to virtual machine fork' ||
			{ tp_fail $name "$f's kernel did not reseed on the restore (no 'crng reseeded due to virtual machine fork')"; return 1; }
	done
	ok $name

	name=sandbox-template-memory-not-shared
	# A tmpfs file and a process: tpa's memory alone.
	tp_root tpa 'mkdir -p /run/tpm && mount -t tmpfs tpm /run/tpm && echo secret-of-tpa >/run/tpm/marker &&
		cp /bin/sleep /run/tpm/tpamarker && (/run/tpm/tpamarker 1000 </dev/null >/dev/null 2>&1 &)' ||
		{ tp_fail $name "cannot write tpa's marker"; return 1; }
	tp_in tpa 'grep -q secret-of-tpa /run/tpm/marker && cat /proc/[0-9]*/comm | grep -qx tpamarker' ||
		{ tp_fail $name "tpa's marker is not in its own memory"; return 1; }
	tp_in tpb 'test ! -e /run/tpm/marker && ! cat /proc/[0-9]*/comm | grep -qx tpamarker' ||
		{ tp_fail $name "tpa's marker or process is seen in tpb"; return 1; }
	tp_sb create --name tpc --mem $TP_MEM >/dev/null 2>>"$WORK/out" && tp_sb start tpc 2>>"$WORK/out" ||
		{ tp_fail $name "create/start tpc after tpa wrote failed"; return 1; }
	tp_in tpc 'test ! -e /run/tpm/marker && ! cat /proc/[0-9]*/comm | grep -qx tpamarker' || { tp_fail $name "a sandbox started later sees tpa's marker"; return 1; }
	tp_sb rm -f tpc >/dev/null 2>&1
	sum1=$(sha256sum <"$dir/checkpoints/c1/memory")
	[ "$sum0" = "$sum1" ] || { tp_fail $name "the template's memory file changed"; return 1; }
	ok $name

	# tpa read its boot_id above, before this checkpoint: the fork and the
	# rewound tpa each get a new one (the guest kernel patch), not c1's.
	name=sandbox-template-checkpoint-fork
	tp_root tpa 'echo before >/root/f' || { tp_fail $name "write failed"; return 1; }
	b=$(tp_in tpa 'cat /proc/sys/kernel/random/boot_id')
	tp_sb checkpoint tpa >/dev/null 2>>"$WORK/out" || { tp_fail $name "checkpoint of tpa failed"; return 1; }
	tp_root tpa 'echo after >/root/f'
	tp_sb fork tpa c1 --name tpf >/dev/null 2>>"$WORK/out" || { tp_fail $name "fork of tpa failed"; return 1; }
	[ "$(tp_root tpf 'cat /root/f')" = before ] || { tp_fail $name "the fork's /root/f is not c1's"; return 1; }
	f=$(tp_in tpf 'cat /proc/sys/kernel/random/boot_id')
	tp_sb rewind tpa c1 >/dev/null 2>>"$WORK/out" || { tp_fail $name "rewind of tpa failed"; return 1; }
	[ "$(tp_root tpa 'cat /root/f')" = before ] || { tp_fail $name "rewound tpa's /root/f is not c1's"; return 1; }
	a=$(tp_in tpa 'cat /proc/sys/kernel/random/boot_id')
	echo "  boot_id: tpa at c1 $b, fork tpf $f, tpa rewound to c1 $a"
	[ -n "$b" ] && [ -n "$f" ] && [ -n "$a" ] && [ "$f" != "$b" ] && [ "$a" != "$b" ] && [ "$a" != "$f" ] ||
		{ tp_fail $name "a fork or rewind kept the checkpoint's boot_id"; return 1; }
	tp_sb ps >"$WORK/ps.out" 2>&1
	grep -q "^tpf\b.*running" "$WORK/ps.out" && grep -q "^tpa\b.*running" "$WORK/ps.out" ||
		{ cat "$WORK/ps.out"; tp_fail $name "ps does not show tpa and tpf running"; return 1; }
	ok $name

	# Two forks of one checkpoint are siblings too: right after their
	# restore they differ in boot_id, random bytes and machine-id.
	name=sandbox-template-sibling-forks-differ
	tp_sb fork tpa c1 --name tpg >/dev/null 2>>"$WORK/out" || { tp_fail $name "second fork of tpa c1 failed"; return 1; }
	a=$(tp_in tpf "$TP_IDENTITY"); b=$(tp_in tpg "$TP_IDENTITY")
	echo "  tpf: $(echo $a)"; echo "  tpg: $(echo $b)"
	tp_differ $name "$a" "$b" 3 || return 1
	tp_sb rm -f tpg >/dev/null 2>&1
	ok $name

	# A live fork of tpb, whose RAM is still a private view of the
	# template's file: the VMM copies it into a memfd, freezes that and
	# hands it over, so the fork runs at once (it used to wait for a
	# memory file), with tpb's running processes, and its own boot_id.
	name=sandbox-template-live-fork
	tp_in tpb 'setsid sh -c '\''n=0; while :; do n=$((n+1)); echo $n >/tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done'\'' </dev/null >/dev/null 2>&1 & echo $! >/tmp/counter.pid' ||
		{ tp_fail $name "exec in tpb failed"; return 1; }
	sleep 2
	rc=$(tp_in tpb 'cat /tmp/counter.pid')
	b=$(tp_in tpb 'cat /proc/sys/kernel/random/boot_id')
	t0=$(date +%s%N)
	tp_sb fork tpb --name tpl >/dev/null 2>"$WORK/fork.err" || { sed 's/^/  /' "$WORK/fork.err"; tp_fail $name "live fork of tpb failed"; return 1; }
	sed 's/^/  /' "$WORK/fork.err"
	echo "  live fork of a template-started sandbox: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
	grep -q "(live" "$WORK/fork.err" || { tp_fail $name "the fork of template-started tpb was not live"; return 1; }
	f=$(sed -n "s/^kosa8 fork: checkpoint \(c[0-9]*\) of 'tpb'.*/\1/p" "$WORK/fork.err")
	tp_in tpl "kill -0 $rc" || { tp_fail $name "tpb's counter (pid $rc) is not in the fork"; return 1; }
	a=$(tp_in tpl 'cat /tmp/count')
	sleep 1
	[ -n "$a" ] && [ "$(tp_in tpl 'cat /tmp/count')" -gt "$a" ] || { tp_fail $name "the fork's counter does not count on from $a"; return 1; }
	tp_in tpb 'echo parent >/tmp/after' && tp_in tpl 'test ! -e /tmp/after' ||
		{ tp_fail $name "a file tpb wrote after the fork is in the fork"; return 1; }
	a=$(tp_in tpl 'cat /proc/sys/kernel/random/boot_id')
	[ -n "$a" ] && [ "$a" != "$b" ] || { tp_fail $name "the fork kept tpb's boot_id $b"; return 1; }
	dir=$WORK/tpstate/sandboxes/tpb/checkpoints/$f
	for rc in $(seq 1 120); do [ -e "$dir/memory" ] && break; sleep 1; done
	[ -n "$f" ] && [ -s "$dir/memory" ] && [ ! -e "$dir/memory.part" ] ||
		{ tp_fail $name "checkpoint '$f' of tpb has no complete memory file after the fork"; return 1; }
	# A second live fork would freeze a second RAM-sized copy in tpb's
	# cgroup while tpl still maps the first: it waits for a file instead.
	tp_sb fork tpb --name tpm >/dev/null 2>"$WORK/fork.err" || { sed 's/^/  /' "$WORK/fork.err"; tp_fail $name "second fork of tpb failed"; return 1; }
	sed 's/^/  /' "$WORK/fork.err"
	grep -q "(live" "$WORK/fork.err" && { tp_fail $name "a second live fork of tpb froze its memory again"; return 1; }
	a=$(tp_in tpm 'cat /proc/sys/kernel/random/boot_id')
	[ -n "$a" ] && [ "$a" != "$b" ] || { tp_fail $name "the second fork kept tpb's boot_id $b"; return 1; }
	dir=$(tp_dir_of $((384 * 1024 * 1024)))
	tp_clear
	ok $name

	# Two runs at once that need the same missing template (another
	# --mem, and a kernel copy that prune will then find gone).
	name=sandbox-template-concurrent-make
	cp "$KOSA8_KERNEL" "$WORK/kernel-copy"
	KOSA8_KERNEL=$WORK/kernel-copy tp_sb run --rm --mem 320M -- true 2>"$WORK/c1.err" & a=$!
	KOSA8_KERNEL=$WORK/kernel-copy tp_sb run --rm --mem 320M -- true 2>"$WORK/c2.err" & b=$!
	wait $a; rc=$?; wait $b; rc=$((rc + $?))
	sed 's/^/  1: /' "$WORK/c1.err"; sed 's/^/  2: /' "$WORK/c2.err"
	[ $rc -eq 0 ] || { tp_fail $name "a run failed"; return 1; }
	[ "$(cat "$WORK/c1.err" "$WORK/c2.err" | grep -c "making the template")" = 1 ] ||
		{ tp_fail $name "not exactly one run made the template"; return 1; }
	grep -q "waited for another kosa8" "$WORK/c1.err" "$WORK/c2.err" || { tp_fail $name "neither run waited"; return 1; }
	[ "$(ls -d "$WORK"/tpstate/templates/*/ | wc -l)" = 2 ] || { tp_fail $name "want two templates (two --mem)"; return 1; }
	ok $name

	name=sandbox-template-prune
	rm -f "$WORK/kernel-copy"
	tp_sb image prune >"$WORK/prune.out" 2>&1
	sed 's/^/  /' "$WORK/prune.out"
	grep -q "^removed .*kernel-copy" "$WORK/prune.out" || { tp_fail $name "prune did not remove the template of the gone kernel"; return 1; }
	[ "$(ls -d "$WORK"/tpstate/templates/*/ | wc -l)" = 1 ] && [ -d "$dir" ] ||
		{ tp_fail $name "prune removed the wrong templates"; return 1; }
	ok $name
}
