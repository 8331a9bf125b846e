#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests: initdb into DIR/data, the server
# listening only on a Unix socket in DIR/sock (no TCP), trust authentication
# for the superuser "agentd". As root, the cluster runs as the unprivileged
# user "nobody" (PostgreSQL refuses root); DIR is made traversable for it.
#
#   tests/pg/cluster.sh start DIR   prints the conninfo prefix: host=DIR/sock port=5432 user=agentd
#   tests/pg/cluster.sh start DIR durable   the same, durable: for benchmarks
#   tests/pg/cluster.sh stop DIR    stops the server by the pid in its pid file
#   tests/pg/cluster.sh restart DIR restarts it (fast shutdown: sessions are ended), same settings
#
# Settings favour speed over durability (fsync off): the data is thrown away.
# `durable` keeps PostgreSQL's defaults for durability instead (fsync,
# synchronous_commit and full_page_writes on), so a commit waits for its WAL
# flush as on a production server, and preloads pg_stat_statements (each
# statement counted: the benchmarks' round trips) with WAL I/O timing on.
set -euo pipefail
cmd=${1:-}
dir=${2:-}
mode=${3:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|restart DIR [durable]" >&2; exit 2; }
case "$mode" in
"") settings="-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=32MB" ;;
durable) settings="-c fsync=on -c synchronous_commit=on -c full_page_writes=on -c shared_buffers=128MB \
	-c shared_preload_libraries=pg_stat_statements -c track_wal_io_timing=on" ;;
*) echo "usage: $0 start|stop|restart DIR [durable]" >&2; exit 2 ;;
esac

bindir=""
for d in /usr/lib/postgresql/*/bin; do
	[ -x "$d/initdb" ] && bindir=$d
done
if [ -z "$bindir" ] && command -v initdb >/dev/null; then
	bindir=$(dirname "$(command -v initdb)")
fi

as_owner() {
	if [ "$(id -u)" -eq 0 ]; then
		setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"
	else
		"$@"
	fi
}

case "$cmd" in
start)
	[ -n "$bindir" ] || { echo "cluster.sh: initdb not found (scripts/deps.sh installs postgresql)" >&2; exit 1; }
	mkdir -p "$dir/data" "$dir/sock"
	dir=$(cd "$dir" && pwd)
	if [ "$(id -u)" -eq 0 ]; then
		chmod 755 "$dir"
		setpriv --reuid=nobody --regid=nogroup --clear-groups -- test -x "$dir" ||
			{ echo "cluster.sh: $dir must be reachable by the user nobody (a directory under /tmp is)" >&2; exit 1; }
		chown nobody:nogroup "$dir/data" "$dir/sock"
		touch "$dir/log"
		chown nobody:nogroup "$dir/log"
	fi
	chmod 700 "$dir/data"
	as_owner "$bindir/initdb" -D "$dir/data" -U agentd --auth=trust --no-sync -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; exit 1; }
	as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 -o "-c listen_addresses='' -c port=5432 \
		-c unix_socket_directories='$dir/sock' $settings -c max_connections=200" start >/dev/null ||
		{ cat "$dir/log" >&2; exit 1; }
	echo "host=$dir/sock port=5432 user=agentd" # the port names the socket file, whatever PGPORT says
	;;
restart)
	[ -n "$bindir" ] || { echo "cluster.sh: pg_ctl not found" >&2; exit 1; }
	dir=$(cd "$dir" && pwd)
	# pg_ctl restart starts the server with the options it was started with (postmaster.opts).
	as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 -m fast restart >/dev/null ||
		{ tail -n 20 "$dir/log" >&2; exit 1; }
	;;
stop)
	pidfile="$dir/data/postmaster.pid"
	[ -f "$pidfile" ] || exit 0
	pid=$(head -n1 "$pidfile")
	[ -n "$pid" ] || exit 0
	kill -INT "$pid" 2>/dev/null || exit 0 # fast shutdown
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || exit 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	;;
*)
	echo "usage: $0 start|stop|restart DIR" >&2
	exit 2
	;;
esac
