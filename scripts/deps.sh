#!/usr/bin/env bash
# Install agentd's build and test dependencies from Debian packages when any is missing.
# Usage: scripts/deps.sh [--bench]   (--bench adds SQLite and Redis, used only by benchmarks)
# Also installs the npm packages tests/mcp, tests/web and clients/typescript pin (their node_modules, git-ignored).
set -euo pipefail
pkgs=(build-essential cmake pkg-config liblmdb-dev lmdb-utils libmsgpack-dev check libbsd-dev
      libjansson-dev libinih-dev libcurl4-openssl-dev clang python3 python3-pytest procps valgrind gdb
      libsystemd-dev systemd man-db groff-base dpkg-dev libmicrohttpd-dev libsodium-dev chromium libpq-dev postgresql
      python3-pip python3-venv)
# libsystemd-dev: sd_notify (supervisor/notify.c). systemd (systemd-analyze), man-db and
# groff-base (man --warnings), dpkg-dev (cpack's dpkg-shlibdeps): tests/proc/test_install.py.
# libmicrohttpd-dev: agentd-web; libsodium-dev: its --users password hashes (argon2id, web/users.c); chromium: its browser test (tests/proc/test_web_browser.py).
# libpq-dev: the PostgreSQL store (store/store_pg.c); postgresql: its tests' throwaway cluster.
# python3-pip, python3-venv: the Python client's offline install test (clients/python/tests/test_install.py).
# Node.js and npm: the real MCP servers (tests/proc/test_mcp.py) and the browser driver. Debian's,
# unless one is installed already (another packaging of it, such as NodeSource's, conflicts with
# Debian's npm package).
command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
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
# The npm packages each lock file pins (the real MCP servers, the browser driver, the TypeScript
# client's compiler and Node's type definitions), from the npm registry, again only when a lock file
# changed.
for dir in tests/mcp tests/web clients/typescript; do
	d="$(cd "$(dirname "$0")/.." && pwd)/$dir"
	if ! cmp -s "$d/package-lock.json" "$d/node_modules/.agentd-installed-lock" 2>/dev/null; then
		echo "deps: npm ci in $dir" >&2
		(cd "$d" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
		cp "$d/package-lock.json" "$d/node_modules/.agentd-installed-lock"
	fi
done
