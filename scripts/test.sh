#!/usr/bin/env bash
# Build agentd and pass every test: the Check suites (with the store
# conformance suite) and the process-level tests, first in a normal build
# (where every process test runs a second time with agentd and its workers
# under valgrind memcheck), then again under ASan+UBSan, then the fuzz
# targets for a bounded time. About 15 minutes on 2 cores.
# Usage: scripts/test.sh [--quick]   (--quick: the normal build's tests only)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

run_suite() { # build dir, extra cmake args...
	local dir=$1; shift
	cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
	cmake --build "$dir" -j "$jobs"
	(cd "$dir" && ctest --output-on-failure -j 1)
}

run_suite build
if [ "${1:-}" != "--quick" ]; then
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	AGENTD_TEST_SLOW=3 run_suite build-asan -DAGENTD_SANITIZE=ON
	# Bounded fuzzing of every parser (libFuzzer, clang).
	scripts/fuzz.sh "${AGENTD_FUZZ_SECS:-20}"
fi
echo "all tests passed"
