#!/usr/bin/env bash
# Build the libFuzzer targets with clang and run each for a bounded time over
# its seed corpus (tests/fuzz/corpus/NAME, copied so the repo is untouched).
# Usage: scripts/fuzz.sh [SECONDS per target, default 20] [target...]
# A crash leaves its input in build-fuzz/artifacts/ and fails the run; add it
# to the corpus and a regression test once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(proto ipc msgpack model records stream)
CC=clang cmake -S . -B build-fuzz -DAGENTD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc 2>/dev/null || echo 2)" --target "${targets[@]/#/fuzz_}" >/dev/null
mkdir -p build-fuzz/artifacts
for t in "${targets[@]}"; do
	work=$(mktemp -d)
	cp -r "tests/fuzz/corpus/$t/." "$work/"
	echo "fuzz_$t: ${secs}s"
	if ! ASAN_OPTIONS=detect_leaks=1 ./build-fuzz/tests/fuzz/fuzz_"$t" -max_total_time="$secs" -timeout=10 \
		-rss_limit_mb=2048 -artifact_prefix=build-fuzz/artifacts/ "$work" >build-fuzz/fuzz_"$t".log 2>&1; then
		tail -40 build-fuzz/fuzz_"$t".log
		echo "fuzz_$t FAILED (input in build-fuzz/artifacts/)"
		rm -rf "$work"
		exit 1
	fi
	grep -E '^Done|DONE' build-fuzz/fuzz_"$t".log | tail -1
	rm -rf "$work"
done
