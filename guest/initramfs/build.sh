#!/usr/bin/env bash
# Builds kosa8's tiny test initramfs: busybox-static, its applet links, the
# /init next to this script, vsock-probe and the escape suite's
# virtq-attack (tests/security; both built here, static), as a
# gzip-compressed newc cpio.  No root needed:
# the one device node the kernel wants before /init runs (/dev/console) is
# written as a second cpio archive by hand; the kernel unpacks both.
#
#   guest/initramfs/build.sh          build if needed; last stdout line is the path
#   guest/initramfs/build.sh --path   print the path of the cached image, or fail
#
# Result: <cache>/initramfs/<key>/initramfs.cpio.gz, where <cache> is
# ${KOSA8_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kosa8} and <key> hashes
# this script, /init, vsock-probe.c, virtq-attack.c and the busybox binary.  The build is reproducible: fixed
# owners, times and inode numbers.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
busybox=/bin/busybox
cache=${KOSA8_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kosa8}
idir=$cache/initramfs
name=initramfs.cpio.gz

say() { echo "[initramfs] $*" >&2; }
die() { echo "[initramfs] error: $*" >&2; exit 1; }

[ -x "$busybox" ] || die "$busybox is missing (install busybox-static: make deps)"
# A dynamically linked busybox (package busybox) would not run in the image.
if file -L "$busybox" 2>/dev/null | grep -q 'dynamically linked'; then
	die "$busybox is dynamically linked; install busybox-static (make deps)"
fi
attack=$here/../../tests/security/virtq-attack.c
key=$(cat "$0" "$here/init" "$here/vsock-probe.c" "$attack" "$busybox" | sha256sum | cut -c1-16)
out=$idir/$key

if [ "${1:-}" = "--path" ]; then
	[ -f "$out/$name" ] || die "not built yet for key $key (run: guest/initramfs/build.sh or make initramfs)"
	echo "$out/$name"
	exit 0
fi
[ $# -eq 0 ] || die "usage: $0 [--path]"

# One newc cpio entry: header of hex fields, name padded to 4 bytes.
# Arguments: name mode(octal) rdevmajor rdevminor.  Only for empty entries.
newc_entry() {
	local n=$(($(printf %s "$1" | wc -c) + 1)) pad
	printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%s\0' \
		1 "$((8#$2))" 0 0 1 0 0 0 0 "$3" "$4" "$n" 0 "$1"
	pad=$(((4 - (110 + n) % 4) % 4))
	head -c "$pad" /dev/zero
}

build() {
	local stage tmp applet
	command -v cpio >/dev/null || die "cpio is missing (make deps)"
	stage=$(mktemp -d "$idir/stage.XXXXXX")
	tmp=$(mktemp -d "$idir/$key.XXXXXX")
	mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,root,etc}
	cp "$busybox" "$stage/bin/busybox"
	install -m 755 "$here/init" "$stage/init"
	${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -Werror -static -o "$stage/bin/vsock-probe" \
		"$here/vsock-probe.c" || die "cannot build vsock-probe (a C compiler and static libc: make deps)"
	${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -Werror -static -o "$stage/bin/virtq-attack" \
		"$attack" || die "cannot build virtq-attack (a C compiler and static libc: make deps)"
	# Every applet as a symlink, so that the shell test finds its commands.
	for applet in $("$busybox" --list-full); do
		[ -e "$stage/$applet" ] || ln -s /bin/busybox "$stage/$applet"
	done
	find "$stage" -exec touch -h -d @0 {} +
	(
		cd "$stage"
		find . -mindepth 1 | LC_ALL=C sort |
			cpio --quiet -o -H newc -R 0:0 --reproducible
		# /dev/console (char 5:1): the kernel opens it for /init's stdio.
		newc_entry dev/console 020600 5 1
		newc_entry TRAILER!!! 0 0 0
	) | gzip -9 -n >"$tmp/$name"
	rm -rf "$stage"
	chmod 755 "$tmp"
	mv -T "$tmp" "$out"
	say "$out/$name ($(stat -c %s "$out/$name") bytes)"
}

if [ ! -f "$out/$name" ]; then
	mkdir -p "$idir"
	exec 9>"$idir/.lock"
	flock 9
	[ -f "$out/$name" ] || build
fi
echo "$out/$name"
