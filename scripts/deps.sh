#!/bin/sh
# Installs the Debian packages kosa8 needs to build, to build its guest kernel
# and images, and to run its tests.  Run as root (or through sudo).
#   scripts/deps.sh            all of them
#   scripts/deps.sh --kernel   only those guest/kernel/build.sh needs (x86-64):
#                              .ci/run builds the kernel, the longest step,
#                              while the rest installs
set -eu
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
# arm64 images run their packages' scripts through qemu-user, which binfmt_misc
# must know: binfmt-support registers it where binfmt_misc is mounted, which a
# container may not have done.
binfmt() {
	f=/proc/sys/fs/binfmt_misc
	[ -e $f/qemu-aarch64 ] || ! command -v update-binfmts >/dev/null || {
		[ -e $f/register ] || $SUDO mount -t binfmt_misc binfmt_misc $f || return 0
		$SUDO update-binfmts --enable qemu-aarch64 || true
	}
}
# python3-grpcio, python3-protobuf and protobuf-compiler: the CRI client of
# tests/oci/cri_test.py (Debian has no crictl).
PKGS="
  build-essential pkg-config clang libclang-rt-14-dev
  libssl-dev libcjson-dev libcmocka-dev libseccomp-dev zlib1g-dev
  libmicrohttpd-dev libpsl-dev
  libarchive-dev libcurl4-openssl-dev
  chromium chromium-driver python3-selenium
  linux-source-6.1 patch bc flex bison libelf-dev cpio xz-utils kmod lz4
  busybox-static
  mmdebstrap e2fsprogs
  qemu-system-x86 linux-image-amd64
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-system-arm
  qemu-user-static binfmt-support arch-test
  hyperfine
  bind9-dnsutils
  curl openssl python3 git
  python3-grpcio python3-protobuf protobuf-compiler
  man-db groff-base fish zsh
  dpkg-dev lintian
  libfdt-dev
"
KERNEL_PKGS="build-essential linux-source-6.1 patch bc flex bison libelf-dev xz-utils lz4"
case ${1:-} in
--kernel) PKGS=$KERNEL_PKGS ;;
"") ;;
*) echo "usage: scripts/deps.sh [--kernel]" >&2; exit 2 ;;
esac
# arm64 (make arm64, testbed/run-arm64): their arm64 packages are unpacked,
# not installed (scripts/arm64-sysroot), but apt must know the architecture.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	$SUDO dpkg --add-architecture arm64
	$SUDO apt-get update -q
fi
# Skip apt entirely when everything is there: keeps 'make check' fast and offline.
missing=
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -z "$missing" ]; then
	binfmt
	echo "deps: all packages present"
	exit 0
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
binfmt
