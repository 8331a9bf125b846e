#!/usr/bin/env bash
# Install agentd's build and test dependencies from Debian packages when any is missing.
# Usage: scripts/deps.sh [--bench]   (--bench adds SQLite and Redis, used only by benchmarks)
set -euo pipefail
pkgs=(build-essential cmake pkg-config liblmdb-dev lmdb-utils libmsgpack-dev check libbsd-dev
      libjansson-dev libinih-dev libcurl4-openssl-dev clang python3 python3-pytest procps valgrind gdb
      libsystemd-dev systemd man-db groff-base dpkg-dev nodejs npm)
# libsystemd-dev: sd_notify (supervisor/notify.c). systemd (systemd-analyze), man-db and
# groff-base (man --warnings), dpkg-dev (cpack's dpkg-shlibdeps): tests/proc/test_install.py.
# nodejs, npm: the MCP servers tests/proc/test_mcp.py runs (npm ci in tests/mcp, below).
[ "${1:-}" = "--bench" ] && pkgs+=(libsqlite3-dev redis-server redis-tools)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
	echo "deps: installing ${missing[*]}" >&2
	sudo=""
	[ "$(id -u)" -ne 0 ] && sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The real MCP servers the process tests run (tests/mcp/package-lock.json pins them), from npm.
mcp_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/mcp"
if [ ! -f "$mcp_dir/node_modules/.package-lock.json" ] || [ "$mcp_dir/package-lock.json" -nt "$mcp_dir/node_modules/.package-lock.json" ]; then
	echo "deps: npm ci in tests/mcp" >&2
	(cd "$mcp_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
