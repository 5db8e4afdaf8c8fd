#!/bin/sh
# Unpacks Debian's containerd, docker.io and runc (their binaries, not
# installed: no daemon, no service on this machine) into the cache, for
# tests/oci/docker_test.sh, which runs them in the helper VM.  Needs apt's
# package lists (apt-get update) and the network once; later runs reuse it.
#
#   scripts/oci-tools.sh   -> <cache>/oci-tools/tree/usr/{bin,sbin}/...
set -eu
dir=${KOSA8_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kosa8}/oci-tools
pkgs="containerd docker.io runc"
if [ -x "$dir/tree/usr/sbin/dockerd" ] && [ -x "$dir/tree/usr/bin/containerd" ]; then
	echo "oci-tools: $dir/tree is there"
	exit 0
fi
mkdir -p "$dir/debs"
rm -rf "$dir/tree.new"
# apt-get download writes into the current folder, as the calling user.
# A machine whose packages were all present may never have fetched apt's
# lists (make deps updates them only to install): fetch them once then.
(cd "$dir/debs" && apt-get download $pkgs) || {
	apt-get update -q
	(cd "$dir/debs" && apt-get download $pkgs)
}
for d in "$dir"/debs/*.deb; do dpkg-deb -x "$d" "$dir/tree.new"; done
rm -rf "$dir/tree"
mv "$dir/tree.new" "$dir/tree"
echo "oci-tools: $(cd "$dir/debs" && ls) -> $dir/tree"
