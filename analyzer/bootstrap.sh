#!/usr/bin/env bash
# Set up pktflow in ./.venv from this checkout.
#   bash analyzer/bootstrap.sh          the analyzer only
#   bash analyzer/bootstrap.sh --test   plus the test dependencies and, when run as root (or with
#                                       sudo), the Debian packages the tests drive: PostgreSQL 15,
#                                       PgBouncer, Pgpool-II, tcpdump, tshark, tcptrace,
#                                       Chromium (the HTML report is tested in a browser),
#                                       for the lab's network conditions iptables, gcc and
#                                       libnetfilter-queue-dev (its delay line is built per run),
#                                       for the compose stack docker.io, docker-compose and
#                                       debootstrap (its test starts a dockerd of its own and
#                                       makes the base image from the Debian mirror), and for the
#                                       lab's detection corpus dropbear-bin and curl (a real SSH
#                                       server, binaries only; an HTTP client)
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
[ "${1:-}" = "--test" ] && want_tests=1

say() { echo "bootstrap: $*" >&2; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else return 1
    fi
}

apt_install() {
    command -v apt-get >/dev/null 2>&1 || return 1
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq >/dev/null && as_root apt-get install -y -qq "$@" >/dev/null
}

python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "bootstrap: pktflow needs Python 3.11 or newer ($python is older)" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
    say "making the virtual environment .venv ($("$python" --version 2>&1))"
    if ! "$python" -m venv .venv >/dev/null 2>&1; then
        # Debian and Ubuntu ship venv separately.
        rm -rf .venv
        apt_install python3-venv || {
            echo "bootstrap: '$python -m venv' failed; install python3-venv" >&2; exit 1; }
        "$python" -m venv .venv
    fi
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true

# The core is Rust (analyzer/core), built by maturin when pip installs the package: it needs
# cargo and a linker. rustup's toolchain is used when present; otherwise Debian 12's
# rustc-web/cargo-web (a current Rust; Debian 13's plain cargo is current too).
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
    echo "bootstrap: installing a Rust toolchain (Debian packages)" >&2
    apt_install rustc-web cargo-web 2>/dev/null || apt_install rustc cargo || {
        echo "bootstrap: pktflow's core needs cargo (Rust >= 1.83); install rustup or cargo" >&2
        exit 1; }
fi
command -v cc >/dev/null 2>&1 || apt_install gcc || true

if [ "$want_tests" = 1 ]; then
    pkgs="postgresql-15 postgresql-client-15 pgbouncer pgpool2 tcpdump tshark tcptrace iproute2 ethtool openssl docker.io docker-compose debootstrap chromium iptables gcc libc6-dev libnetfilter-queue-dev dropbear-bin curl"
    missing=""
    for p in $pkgs; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        say "installing Debian packages:$missing"
        apt_install $missing || say "could not install$missing; tests that need them will be skipped"
    fi
    target='.[test]' extra=" with the test dependencies"
else
    target='.' extra=""
fi
# pip builds the core through maturin and cargo, quietly for minutes the first time: say so,
# then name each crate as cargo compiles it (the full log is kept for a failure).
say "building pktflow's core (Rust, analyzer/core) and installing pktflow$extra into .venv:" \
    "a few minutes the first time, seconds after"
log=$(mktemp "${TMPDIR:-/tmp}/pktflow-bootstrap.XXXXXX")
started=$SECONDS
progress() {  # a shell loop, line by line: awk would hold the lines until its buffer fills
    local n=0 word crate rest
    while read -r word crate rest; do
        [ "$word" = Compiling ] || continue
        n=$((n + 1))
        if [ -t 2 ]; then printf '\rbootstrap:   compiling %s (crate %d)\033[K' "$crate" "$n" >&2
        else printf 'bootstrap:   compiling %s (crate %d)\n' "$crate" "$n" >&2
        fi
    done
    if [ "$n" -gt 0 ] && [ -t 2 ]; then echo >&2; fi
}
if ! .venv/bin/python -m pip install -v -e "$target" 2>&1 | tee "$log" | progress; then
    tail -n 40 "$log" >&2
    say "installing pktflow failed (above: the end of pip's log; all of it: $log)"
    exit 1
fi
rm -f "$log"
say "pktflow installed in $((SECONDS - started)) s"
# Byte-compile now: where PYTHONDONTWRITEBYTECODE is set (container images often set it) Python
# would otherwise compile every module from source at each start, 20 ms of a 50 ms run.
.venv/bin/python -m compileall -q analyzer/pktflow >/dev/null || true
.venv/bin/pktflow --version >&2
