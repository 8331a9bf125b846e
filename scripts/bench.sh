#!/usr/bin/env bash
# Build the benchmark programs (Release, -DAGENTD_BENCH=ON, in build-bench) and run them.
# Usage: [BENCH_PEERS=1] scripts/bench.sh [bench_store options]   e.g. scripts/bench.sh -q (a quick smoke run)
# The figures and how to read them: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --bench
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build-bench -DAGENTD_BENCH=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-bench -j "$jobs" --target benchmarks
# The scratch stores go under build-bench: on the checkout's disk, not tmpfs,
# so the durable figures pay for real flushes.
build-bench/bench/bench_store -d build-bench "$@"

# The supervisor and the control protocol (docs/benchmarks.md, "bench_control"
# and "bench_supervisor"): agentd's own processes beside Redis and the raw
# limits. Each program is run on its own, every one under about three minutes;
# -q (anywhere in the arguments) makes them quick smoke runs too.
quick=()
for a in "$@"; do [ "$a" = -q ] && quick=(-q); done
build-bench/bench/bench_control -d build-bench "${quick[@]}"
for phase in revival memory expiry; do
	build-bench/bench/bench_supervisor -d build-bench -o "$phase" "${quick[@]}"
done
# One client's ping beside a flood of slow readers, and agentd's peak memory
# (docs/benchmarks.md, "## Fairness").
build-bench/bench/bench_fairness -d build-bench "${quick[@]}"
# Failover between nodes on one PostgreSQL store, in a throwaway cluster
# (docs/benchmarks.md, "bench_failover"): 20 rounds, or 2 for -q.
if [ ${#quick[@]} -gt 0 ]; then
	build-bench/bench/bench_failover 2 2000
else
	build-bench/bench/bench_failover 20 2000
fi
# agentd on PostgreSQL (docs/benchmarks.md, "bench_pg"): durable sends with 50
# clients on 1 and 3 nodes beside a bare libpq loop and LMDB, and expiry
# lateness on both backends, in a durable throwaway cluster (fsync on).
build-bench/bench/bench_pg -d build-bench "${quick[@]}"
# Churn with and without retention, and agentd compact (docs/benchmarks.md, "Retention soak").
bench/soak_retention.py build-bench -d build-bench "${quick[@]}"
# agentd beside LangGraph.js, DBOS and Restate (docs/benchmarks.md, "bench_peers"), only with
# BENCH_PEERS=1: it installs the peers from npm into bench/peers (benchmark-only, a few minutes).
if [ "${BENCH_PEERS:-}" = 1 ]; then (cd clients/typescript && npm ci && npx tsc -p .) && (cd bench/peers && npm ci) && node bench/peers/run.mjs --agentd build-bench/agentd "${quick[@]}"; fi
