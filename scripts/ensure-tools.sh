#!/usr/bin/env bash
# Install the Debian packages the test suite uses as real OTF2 clients, when missing:
# otf2-print (otf2-tools) and OpenMPI (mpiexec, mpicc) are required, ViTE (vite) is best effort.
# Each is installed only when its command is missing; `apt-get update` runs once, only if
# something is to be installed. APT_GET may name another apt-get (the tests use a stub).
set -euo pipefail
APT_GET="${APT_GET:-apt-get}"
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
updated=0
apt_install() {
    if [ "$updated" = 0 ]; then $SUDO "$APT_GET" update -qq; updated=1; fi
    DEBIAN_FRONTEND=noninteractive $SUDO "$APT_GET" install -y -qq --no-install-recommends "$@"
}
missing() { ! command -v "$1" >/dev/null 2>&1; }

if missing otf2-print; then
    echo "installing otf2-tools (otf2-print) from Debian"
    apt_install otf2-tools
fi
if missing mpiexec || missing mpicc; then
    echo "installing OpenMPI (mpiexec, mpicc) from Debian for the parallel-conversion tests"
    apt_install openmpi-bin libopenmpi-dev
fi
if missing vite; then
    echo "installing vite (ViTE trace viewer) from Debian"
    apt_install vite || echo "warning: vite could not be installed; its test will be skipped"
fi
for tool in otf2-print mpiexec mpicc; do
    if missing "$tool"; then
        echo "error: $tool is still missing after installing its Debian package" >&2
        exit 1
    fi
done
