#!/usr/bin/env bash
# Install the Debian packages the test suite uses as real OTF2 clients, when missing.
# otf2-print and OpenMPI are required (failure here fails `make test`); vite is best effort.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
updated=0
apt_install() {
    if [ "$updated" = 0 ]; then $SUDO apt-get update -qq; updated=1; fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@"
}
if ! if ! command -v mpiexec >/dev/null 2>&1 || ! command -v mpicc >/dev/null 2>&1; then
    echo "installing OpenMPI (mpiexec, mpicc) from Debian for the parallel-conversion tests"
    apt_install openmpi-bin libopenmpi-dev
fi
command -v otf2-print >/dev/null 2>&1; then
    echo "installing otf2-tools (otf2-print) from Debian"
    apt_install otf2-tools
fi
if ! command -v vite >/dev/null 2>&1; then
    echo "installing vite (ViTE trace viewer) from Debian"
    apt_install vite || echo "warning: vite could not be installed; its test will be skipped"
fi
if ! command -v mpiexec >/dev/null 2>&1 || ! command -v mpicc >/dev/null 2>&1; then
    echo "installing OpenMPI (mpiexec, mpicc) from Debian for the parallel-conversion tests"
    apt_install openmpi-bin libopenmpi-dev
fi
command -v otf2-print >/dev/null
