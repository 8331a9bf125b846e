#!/usr/bin/env bash
# conformance_pg: check_all's conformance suite against the PostgreSQL store,
# then its store_pg suite's server tests, in a cluster started here and
# stopped by its pid on every way out.
# Usage: tests/pg/run_conformance.sh path/to/check_all
set -euo pipefail
check_all=$1
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/agentd-pg-XXXXXX")
cleanup() {
	"$here/cluster.sh" stop "$dir" || true
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
prefix=$("$here/cluster.sh" start "$dir")
psql -X -q "$prefix dbname=postgres" -c "CREATE DATABASE conformance" >/dev/null
export AGENTD_TEST_STORE=pg AGENTD_TEST_PG="$prefix"
CK_RUN_SUITE=conformance "$check_all"
CK_RUN_SUITE=store_pg "$check_all" # what the PostgreSQL store adds, with the server
