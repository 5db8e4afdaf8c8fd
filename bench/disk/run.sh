#!/bin/sh
# Builds and runs the layered-disk benchmark (bench/disk/disk_bench.c).
#   bench/disk/run.sh [DIR] [SIZE_MIB] [REPEATS]
# DIR should be on the file system the sandboxes' disks will live on.
set -eu
cd "$(dirname "$0")/../.."
out=${BUILD_DIR:-build}/bench
mkdir -p "$out"
cc -std=gnu11 -O2 -Wall -Wextra -Werror -Wno-unused-parameter -Isrc -D_GNU_SOURCE -pthread -o "$out/disk_bench" \
	bench/disk/disk_bench.c src/disk/*.c src/common/*.c -lssl -lcrypto
dir=${1:-${TMPDIR:-/tmp}}
work=$(mktemp -d "$dir/kosa8-disk-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$out/disk_bench" "$work" "${2:-512}" "${3:-5}"
