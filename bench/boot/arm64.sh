#!/usr/bin/env bash
# Boot benchmark on arm64: kosa8's arm64 VMM against QEMU's `virt` machine,
# both under arm64 KVM in the aarch64 helper (testbed/run-arm64), booting the
# same kernel (kosa8's, make kernel-arm64) and the same busybox initramfs,
# 1 vCPU, 128 MiB, the PL011 console, interleaved.
#
#   bench/boot/arm64.sh [RUNS]          (default 5) -> a new section at the top of
#                                       bench/results/boot.md (on a shared machine:
#                                       under flock /work/notes/vmslot)
#   bench/boot/arm64.sh --inside RUNS   in the helper (busybox sh: POSIX only)
#
# QEMU is Debian's arm64 qemu-system-arm with the libraries it loads,
# unpacked (not installed) into the cache once and shared read-only with
# the helper.  The helper runs on TCG with EL2 emulated, so absolute times
# are those of emulation; the ratio between the two VMMs is what to read.
set -u
cd "$(dirname "$0")/../.."

if [ "${1:-}" != --inside ]; then
	set -e
	runs=${1:-5}
	make -s arm64
	cache=${KOSA8_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kosa8}
	qdir=$cache/testbed-arm64/qemu-arm64
	if [ ! -x "$qdir/usr/bin/qemu-system-aarch64" ]; then
		# qemu-system-arm's own Depends, less glibc's and qemu's data
		# packages (-kernel needs no firmware), and what those load.
		deps=$(apt-cache depends qemu-system-arm:arm64 |
			sed -n 's/^  *\(Pre\)\{0,1\}Depends: \([a-z0-9][a-z0-9.+-]*\)\(:arm64\)\{0,1\}$/\2/p' |
			grep -vxE 'libc6|libgcc-s1|qemu-system-common|qemu-system-data')
		# shellcheck disable=SC2086 # package names
		pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
			--no-replaces --no-enhances $(printf '%s:arm64 ' $deps) |
			sed -n 's/^\([a-z0-9][a-z0-9.+-]*\):arm64$/\1/p' | sort -u |
			grep -vxE 'libc6|libgcc-s1|gcc-12-base|qemu-system-common|qemu-system-data|debconf|.*-common|perl.*|dpkg|tar|base-files|.*udev$')
		tmp=$(mktemp -d)
		# shellcheck disable=SC2086
		(cd "$tmp" && apt-get download -q qemu-system-arm:arm64 libudev1:arm64 $(printf '%s:arm64 ' $pkgs) >/dev/null)
		rm -rf "$qdir.tmp" && mkdir -p "$qdir.tmp"
		for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$qdir.tmp"; done
		if [ -d "$qdir.tmp/lib/aarch64-linux-gnu" ]; then
			cp -a "$qdir.tmp/lib/aarch64-linux-gnu/." "$qdir.tmp/usr/lib/aarch64-linux-gnu/"
		fi
		dpkg-deb -f "$tmp"/qemu-system-arm_*.deb Version >"$qdir.tmp/VERSION"
		rm -rf "$tmp" "$qdir" && mv "$qdir.tmp" "$qdir"
	fi
	qver=$(cat "$qdir/VERSION")
	kernel=$(guest/kernel/build.sh --arch arm64 --path)
	out=$(mktemp)
	load0=$(cut -d' ' -f1-3 /proc/loadavg)
	export KOSA8_BENCH_KERNEL=$kernel KOSA8_BENCH_QEMU=$qdir
	export TESTBED_ARM64_SHARES="${kernel%/*} $qdir"
	set +e
	testbed/run-arm64 sh bench/boot/arm64.sh --inside "$runs" | tee "$out"
	set -e
	grep -q '^| kosa8' "$out" || { echo "bench/boot/arm64.sh: no result" >&2; exit 1; }
	load1=$(cut -d' ' -f1-3 /proc/loadavg)
	section=$(mktemp)
	{
		echo "## arm64: kosa8's VMM against QEMU's virt machine ($(date -u +%Y-%m-%d), bench/boot/arm64.sh)"
		echo
		echo "Both VMMs under arm64 KVM inside the aarch64 helper (testbed/run-arm64:"
		echo "qemu-system-aarch64 TCG, EL2 emulated, 2 vCPUs) on $(nproc) cores of an x86-64 host,"
		echo "so the times are emulation's; read the ratio.  Host load average (1, 5, 15 min)"
		echo "$load0 before, $load1 after.  Guest: kosa8's arm64 kernel"
		echo "($(basename "$(dirname "$kernel")")) and a busybox initramfs whose init prints the"
		echo "guest's uptime and powers off; 1 vCPU, 128 MiB, PL011 console; $runs rounds, the"
		echo "VMMs interleaved.  QEMU: Debian's qemu-system-arm $qver (arm64),"
		echo "\`-M virt,gic-version=3 -cpu host -accel kvm\`."
		echo
		sed -n '/^|/p; /^kosa8 \//p' "$out"
		echo
		echo "Each boot, seconds (start to userspace, guest uptime):"
		echo
		sed -n 's/^# \(kosa8\|qemu-virt\) /    \1 /p' "$out"
		echo
		echo "Reproduce: \`make deps && make kernel-arm64 && flock /work/notes/vmslot bench/boot/arm64.sh $runs\`."
	} >"$section"
	# The newest section first, under the title.
	awk -v f="$section" '{ print } NR == 1 { print ""; while ((getline l < f) > 0) print l }' \
		bench/results/boot.md >bench/results/boot.md.new && mv bench/results/boot.md.new bench/results/boot.md
	rm -f "$out" "$section"
	echo "wrote a section into bench/results/boot.md"
	exit 0
fi

runs=${2:-5}
tb=${TESTBED_ARM64_DIR:?}
kernel=${KOSA8_BENCH_KERNEL:?}
q=${KOSA8_BENCH_QEMU:?}
vmm=$PWD/build-arm64/kosa8-vmm
w=/tmp/bench
mkdir -p "$w/g/bin" "$w/g/proc" "$w/g/dev"
cp "$tb/busybox" "$w/g/bin/busybox"
cat >"$w/g/init" <<'GUEST'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
echo "k8: uptime=$(/bin/busybox cut -d' ' -f1 /proc/uptime)"
/bin/busybox poweroff -f
GUEST
chmod +x "$w/g/init"
(cd "$w/g" && find . | cpio -o -H newc 2>/dev/null) >"$w/initrd.cpio"

# Seconds since the helper booted, to the hundredth.
now() { cut -d' ' -f1 /proc/uptime; }

# one NAME CMD...: boots once; prints "NAME WALL UPTIME" (WALL: start to the
# uptime line, which is userspace's first output; UPTIME: the guest's own).
one() {
	local name=$1 t0 t1 up pid i=0
	shift
	t0=$(now)
	"$@" </dev/null >"$w/console" 2>&1 &
	pid=$!
	while ! grep -q '^k8: uptime=[0-9.]*[[:space:]]*$' "$w/console"; do
		kill -0 $pid 2>/dev/null || break
		i=$((i + 1))
		[ $i -lt 6000 ] || { kill $pid; break; }
		usleep 20000
	done
	t1=$(now)
	wait $pid
	up=$(sed -n 's/^k8: uptime=\([0-9.]*\).*/\1/p' "$w/console" | tr -d '\r')
	[ -n "$up" ] || { echo "# $name: no uptime line: $(tail -n 5 "$w/console" | tr '\n' '|')" >&2; return; }
	echo "$name $(echo "$t1 $t0" | awk '{printf "%.2f", $1 - $2}') $up"
}

export LD_LIBRARY_PATH=/lib/aarch64-linux-gnu:$q/usr/lib/aarch64-linux-gnu
: >"$w/results"
r=0
while [ $r -lt "$runs" ]; do
	one kosa8 "$vmm" --kernel "$kernel" --initrd "$w/initrd.cpio" --cpus 1 --mem 128M >>"$w/results"
	one qemu-virt "$q/usr/bin/qemu-system-aarch64" -M virt,gic-version=3 -cpu host -accel kvm -m 128 \
		-smp 1 -nographic -no-reboot -nodefaults -serial stdio -kernel "$kernel" -initrd "$w/initrd.cpio" \
		-append "console=ttyAMA0 panic=-1" >>"$w/results"
	r=$((r + 1))
done
cat "$w/results" | sed 's/^/# /'
echo "| VMM | start to userspace, s (median / min / max) | guest uptime at userspace, s (median / min / max) | runs |"
echo "|---|---|---|---|"
for v in kosa8 qemu-virt; do
	awk -v v=$v '$1 == v { print $2, $3 }' "$w/results" >"$w/$v"
	cnt=$(wc -l <"$w/$v")
	[ "$cnt" -gt 0 ] || { echo "| $v | - | - | 0 |"; continue; }
	wall=$(cut -d' ' -f1 "$w/$v" | sort -n | awk '{a[NR]=$1} END {printf "%.2f / %.2f / %.2f", a[int((NR+1)/2)], a[1], a[NR]}')
	up=$(cut -d' ' -f2 "$w/$v" | sort -n | awk '{a[NR]=$1} END {printf "%.2f / %.2f / %.2f", a[int((NR+1)/2)], a[1], a[NR]}')
	echo "| $v | $wall | $up | $cnt |"
done
mk() { cut -d' ' -f"$2" "$w/$1" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
if [ -s "$w/kosa8" ] && [ -s "$w/qemu-virt" ]; then
	echo "kosa8 / QEMU virt, medians: start to userspace $(echo "$(mk kosa8 1) $(mk qemu-virt 1)" | awk '{printf "%.2f", $1 / $2}'), guest uptime $(echo "$(mk kosa8 2) $(mk qemu-virt 2)" | awk '{printf "%.2f", $1 / $2}')"
fi
