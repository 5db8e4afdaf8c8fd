#!/usr/bin/env bash
# Boots the arm64 guest kernel and the arm64 Debian image under plain QEMU
# (`-M virt,gic-version=3 -cpu max`, software emulation, no KVM, no kosa8
# VMM): a check of the arm64 guest artifacts alone.  The devices are the ones
# kosa8's arm64 machine gives: virtio-mmio block and rng described in QEMU's
# device tree, a PL011, GICv3, PSCI, the architected timer.  (QEMU's
# vhost-vsock-device needs /dev/vhost-vsock on the host, which this machine
# lacks: vsock is checked as far as the guest goes, the agent's listening
# socket on the vsock loopback transport.)
#
#   tests/arm64/qemu-boot.sh      run through /work/notes/vmslot where VM slots are shared
#
# Two boots, each against a throw-away overlay of the image (-snapshot):
#   agent  the image's /sbin/init, kosa8-agent, as PID 1 with kosa8.net=on:
#          it must mount its file systems, put up its netfilter rules with the
#          image's ip and iptables, start its egress relay and listen on vsock.
#   shell  init=/bin/bash -c '...': uname, the agent's --version, CPUs brought
#          up by PSCI, the virtio rng as the hardware RNG, ext4 root.
# K8_ARM64_KERNEL / K8_ARM64_IMAGE override the artifacts (default: the cached
# builds of make kernel-arm64 image-arm64).  Prints one line per check and
# exits non-zero if any failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
kernel=${K8_ARM64_KERNEL:-$("$top/guest/kernel/build.sh" --arch arm64 --path)} || exit 1
image=${K8_ARM64_IMAGE:-$("$top/guest/image/build.sh" --arch arm64 \
	--agent "$top/${REL_DIR:-build}/arm64/kosa8-agent" --path default)} || exit 1
timeout=${K8_ARM64_TIMEOUT:-600}
command -v qemu-system-aarch64 >/dev/null || { echo "FAIL qemu-system-aarch64 missing (make deps)"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checks=0 fail=0

# boot NAME UNTIL CMDLINE...: boots, console to $work/NAME.out, until the
# guest powers off (QEMU exits: -no-reboot) or the console shows UNTIL (a
# regex; the agent as PID 1 never exits by itself), or the timeout.
boot() {
	local name=$1 until=$2 out=$work/$1.out pid t0 rc=0
	shift 2
	t0=$(date +%s)
	qemu-system-aarch64 -M virt,gic-version=3 -cpu max -smp 2 -m 512 \
		-nodefaults -display none -no-reboot -serial "file:$out" \
		-kernel "$kernel" -append "console=ttyAMA0 root=/dev/vda rw panic=-1 $*" \
		-drive "if=none,id=root,file=$image,format=raw,snapshot=on" \
		-device virtio-blk-device,drive=root -device virtio-rng-device &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		if [ $(($(date +%s) - t0)) -ge "$timeout" ]; then
			echo "     $name: no end after $timeout s"
			break
		fi
		if [ -n "$until" ] && grep -aqE "$until" "$out" 2>/dev/null; then
			sleep 2   # the lines right after the marker
			break
		fi
		sleep 1
	done
	kill "$pid" 2>/dev/null
	wait "$pid" || rc=$?
	tr -d '\r' <"$out" >"$out.txt"
	echo "     $name: $(($(date +%s) - t0)) s wall, QEMU exit $rc"
}

# has NAME REGEX WHAT / hasnt ...: the console of boot NAME has (has not) a
# line matching REGEX; one PASS or FAIL line for WHAT.
has() {
	checks=$((checks + 1))
	if grep -aqE "$2" "$work/$1.out.txt"; then echo "PASS $1: $3"; return; fi
	echo "FAIL $1: $3 (no line matching '$2')"
	fail=$((fail + 1))
}
hasnt() {
	local line
	checks=$((checks + 1))
	line=$(grep -aE "$2" "$work/$1.out.txt" | head -n1)
	if [ -z "$line" ]; then echo "PASS $1: $3"; return; fi
	echo "FAIL $1: $3 ($line)"
	fail=$((fail + 1))
}

echo "kernel $kernel"
echo "image  $image"

boot agent 'kosa8-agent: listening on vsock:' kosa8.net=on
has agent 'Booting Linux on physical CPU' "the kernel starts"
has agent 'psci: PSCIv[0-9]' "PSCI found in the device tree"
has agent 'GICv3: ' "GICv3 interrupt controller"
has agent 'arch_timer: cp15 timer' "architected timer"
has agent 'ttyAMA0 at MMIO .*PL011' "PL011 console"
has agent 'smp: Brought up 1 node, 2 CPUs' "second CPU on through PSCI"
has agent 'virtio_blk virtio[0-9]+: \[vda\]' "virtio-mmio block device"
has agent 'EXT4-fs \(vda\): mounted filesystem' "ext4 root"
has agent 'NET: Registered PF_VSOCK' "vsock"
has agent 'Run /sbin/init as init process' "the image's init runs"
has agent 'kosa8-agent: egress: TCP on ' "the agent's egress relay starts (kosa8.net=on)"
has agent 'kosa8-agent: listening on vsock:[0-9]+' "the agent listens on vsock"
hasnt agent 'kosa8-agent: (mount|setting up|installing|turning)' "the agent's set-up has no errors"
hasnt agent 'Kernel panic|Oops|BUG:|Unable to handle' "no kernel panic or oops"

# The words after "--" become the init's arguments; the kernel strips the
# double quotes of one.  bash exits, the kernel panics (PID 1 gone) and
# reboots with panic=-1, which QEMU -no-reboot turns into an exit.
script='mount -t proc proc /proc; mount -t sysfs sys /sys;'
script+=' echo k8: arch=$(uname -m);'
script+=' echo k8: agent=$(/usr/sbin/kosa8-agent --version);'
script+=' echo k8: cpus=$(nproc);'
script+=' echo k8: rng=$(cat /sys/class/misc/hw_random/rng_current);'
script+=' echo k8: rngbytes=$(head -c 32 /dev/hwrng | wc -c);'
script+=' echo k8: root=$(findmnt -no FSTYPE /);'
script+=' echo k8: nat=$(iptables -t nat -S OUTPUT | head -n1);'
script+=' echo k8: done'
boot shell '' init=/bin/bash -- -c "\"$script\""
has shell '^k8: arch=aarch64$' "uname -m says aarch64"
has shell '^k8: agent=kosa8-agent [0-9]' "the image's agent runs (--version)"
has shell '^k8: cpus=2$' "2 CPUs online"
has shell '^k8: rng=virtio_rng' "the virtio rng is the hardware RNG"
has shell '^k8: rngbytes=32$' "/dev/hwrng gives bytes"
has shell '^k8: root=ext4$' "root is ext4"
has shell '^k8: nat=-P OUTPUT ACCEPT$' "iptables (nft) reaches the kernel's nat table"
has shell '^k8: done$' "the command ran to its end"

echo "arm64 qemu boot: $((checks - fail)) passed, $fail failed"
[ "$fail" -eq 0 ] && exit 0
# The consoles go with $work: their ends, to see why.
for f in "$work"/*.out.txt; do
	echo "---- last lines of $(basename "$f" .out.txt)'s console"
	tail -n 25 "$f"
done
exit 1
