#!/bin/sh
# Make the compose stack's base image, debian:bookworm-slim, on a machine that cannot pull it:
# debootstrap a minimal Debian 12 from the Debian mirror this host's apt already uses, and
# `docker import` it. Where a registry is reachable, `docker pull debian:bookworm-slim` does
# the same job.
#
#   sh compose/make-base-image.sh            (root: debootstrap needs it)
#   sh compose/make-base-image.sh --sources  print the image's apt sources, and do nothing
#
# The mirror is read from apt's own configuration (apt-get indextargets) at each run, never
# written here; MIRROR=URI and SECURITY_MIRROR=URI override it. The image's apt sources are
# bookworm, bookworm-updates and bookworm-security on those mirrors, as the host's are, so
# the images built on it get the same package versions as the native lab. An image already
# present under the name is kept (FORCE=1 makes it again).
set -eu

image=debian:bookworm-slim
suite=bookworm

# "deb URI SUITE" for each Debian package index apt knows; the first plain one is the mirror,
# the first *-security one the security mirror
targets=$(apt-get indextargets --format '$(TARGET_OF) $(REPO_URI) $(RELEASE)' \
          'Identifier: Packages' 2>/dev/null | awk '$1 == "deb"' | sort -u)
mirror=${MIRROR:-$(echo "$targets" |
                   awk '$3 !~ /-(security|updates|backports)$/ {print $2; exit}')}
security=${SECURITY_MIRROR:-$(echo "$targets" | awk '$3 ~ /-security$/ {print $2; exit}')}
[ -n "$mirror" ] || {
    echo "make-base-image: apt names no Debian mirror here; give one as MIRROR=URI" >&2; exit 1; }
sources() {
    echo "deb $mirror $suite main"
    echo "deb $mirror $suite-updates main"
    [ -z "$security" ] || echo "deb $security $suite-security main"
}
if [ "${1:-}" = --sources ]; then
    sources
    exit 0
fi

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$image" >/dev/null 2>&1; then
    echo "make-base-image: $image is already there (FORCE=1 makes it again)"
    exit 0
fi
[ "$(id -u)" = 0 ] || { echo "make-base-image: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || {
    echo "make-base-image: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
echo "make-base-image: $suite from $mirror (this host's apt sources)"

root=$(mktemp -d "${TMPDIR:-/tmp}/pktflow-base.XXXXXX")
trap 'rm -rf "$root" "$root.log"' EXIT
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1 || {
    echo "make-base-image: debootstrap failed: $(tail -n 3 "$root.log" | tr '\n' ' ')" >&2
    exit 1; }
sources >"$root/etc/apt/sources.list"
# as Debian's own slim images: no caches, no documentation from later installs
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
cat >"$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
tar -C "$root" --numeric-owner -c . | docker import --change 'CMD ["bash"]' - "$image" >/dev/null
echo "make-base-image: made $image"
