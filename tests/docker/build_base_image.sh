#!/usr/bin/env bash
# Build the Docker images the Docker sandbox tests use, from Debian's packages (no image
# registry is needed): a minimal Debian root made with debootstrap, with python3 (no pip, no
# bridge_client: the sandbox's template installs those), imported with `docker import`.
#
#   bridge-client-test-base:<tag>      Debian minbase + python3
#   bridge-client-test-nopython:<tag>  the same root without Python (TemplateError tests)
#
# Cached: nothing is built when both images exist; the root's tarball is kept in
# ${BRIDGE_CLIENT_DOCKER_CACHE:-~/.cache/bridge-client-docker} so a new engine (a fresh
# /var/lib/docker) only imports it. Needs: root, debootstrap, a reachable Debian mirror on the
# first build, and a running Docker engine. Prints the two image names on success.
#
# Usage: tests/docker/build_base_image.sh [TAG]   (TAG defaults to the one the tests use)
set -euo pipefail

TAG="${1:-bookworm-1}"
SUITE="bookworm"
MIRROR="${BRIDGE_CLIENT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CACHE="${BRIDGE_CLIENT_DOCKER_CACHE:-${HOME:-/root}/.cache/bridge-client-docker}"
BASE="bridge-client-test-base:${TAG}"
NOPY="bridge-client-test-nopython:${TAG}"
TARBALL="${CACHE}/root-${TAG}.tar"

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

if have_image "$BASE" && have_image "$NOPY"; then
    echo "$BASE"
    echo "$NOPY"
    exit 0
fi

mkdir -p "$CACHE"
if [ ! -s "$TARBALL" ]; then
    work="$(mktemp -d "${CACHE}/build.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    root="$work/root"
    echo "debootstrap $SUITE (minbase + python3) into $root ..." >&2
    debootstrap --variant=minbase --include=python3 "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
        tail -30 "$work/debootstrap.log" >&2
        exit 1
    }
    # Smaller image, faster container creation on the vfs storage driver (a full copy each).
    rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
        "$root"/usr/share/locale/* "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* \
        "$root"/var/log/* "$root"/usr/share/zoneinfo
    tar --numeric-owner -C "$root" -cf "$work/root.tar" .
    mv "$work/root.tar" "$TARBALL"
fi

have_image "$BASE" || docker import - "$BASE" <"$TARBALL" >/dev/null
if ! have_image "$NOPY"; then
    # The same root without any Python: a tar stream filtered by a throwaway Python on the host.
    python3 - "$TARBALL" <<'EOF' | docker import - "$NOPY" >/dev/null
import re, sys, tarfile
drop = re.compile(r"^\./usr/(bin/python3|lib/python3|lib/x86_64-linux-gnu/libpython|share/python3)|^\./usr/local/lib/python")
with tarfile.open(sys.argv[1]) as src, tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as out:
    for member in src:
        if drop.match(member.name):
            continue
        out.addfile(member, src.extractfile(member) if member.isfile() else None)
EOF
fi
echo "$BASE"
echo "$NOPY"
