#!/usr/bin/env bash
# Install agentd's build and test dependencies from Debian packages when any is missing.
# Usage: scripts/deps.sh [--bench]   (--bench adds SQLite and Redis, used only by benchmarks)
set -euo pipefail
pkgs=(build-essential cmake pkg-config liblmdb-dev lmdb-utils libmsgpack-dev check libbsd-dev
      libjansson-dev libinih-dev libcurl4-openssl-dev clang python3 python3-pytest procps valgrind gdb
      libsystemd-dev systemd man-db groff-base dpkg-dev)
# libsystemd-dev: sd_notify (supervisor/notify.c). systemd (systemd-analyze), man-db and
# groff-base (man --warnings), dpkg-dev (cpack's dpkg-shlibdeps): tests/proc/test_install.py.
[ "${1:-}" = "--bench" ] && pkgs+=(libsqlite3-dev redis-server redis-tools)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
