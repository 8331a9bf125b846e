#!/usr/bin/env bash
# Build agentd and pass every test: the Check suites (with the store
# conformance suite) and the process-level tests, first in a normal build
# (where every process test runs a second time with agentd and its workers
# under valgrind memcheck), then again under ASan+UBSan, then the fuzz
# targets for a bounded time. Each stage says what it runs and how long it
# took; docs/testing.md ("Time") gives the time of each stage. Last, the
# run fails if a test left anything of its own in /tmp or /dev/shm.
# Usage: scripts/test.sh [--quick|--dry-run]   (--quick: the normal build's tests only;
#        --dry-run: print the stages and their commands, run nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
dry=""
[ "${1:-}" = "--dry-run" ] && dry=1
[ -n "$dry" ] || scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
start=$SECONDS
since=$(mktemp) # what is newer was made by this run
trap 'rm -f "$since"' EXIT
times=()

stage() { # name, command...: run it, then say how long it took
	local name=$1 t0=$SECONDS; shift
	echo "test.sh: == $name: $*" >&2
	[ -n "$dry" ] || "$@"
	local t=$((SECONDS - t0))
	times+=("$(printf '%-48s %4dm%02ds' "$name" $((t / 60)) $((t % 60)))")
	echo "test.sh: == $name: done in $((t / 60))m$((t % 60))s" >&2
}

build() { # dir, extra cmake args...
	local dir=$1; shift
	cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
	cmake --build "$dir" -j "$jobs"
}
tests() { # dir, ctest args...: twice as many at once as there are cores (AGENTD_TEST_JOBS overrides)
	# Process tests spend most of their time waiting on processes they started, so twice the cores keeps
	# the machine busy; no test may race a clock, so the load must not fail one (docs/testing.md, "Time").
	local dir=$1; shift
	(cd "$dir" && ctest --output-on-failure -j "${AGENTD_TEST_JOBS:-$((2 * jobs))}" "$@")
}

left_behind() { # marker, dirs...: the tests' temporary files and directories newer than marker, left there
	local marker=$1 left
	shift
	# || true: find fails on a directory that is missing (no /dev/shm) and still lists the others.
	left=$(find "$@" -maxdepth 1 -newer "$marker" \( -name 'agentd-*' -o -name 'vgdb-pipe-*' \) 2>/dev/null || true)
	[ -z "$left" ] && return 0
	echo "test.sh: the tests left these behind (each test removes what it makes):" >&2
	echo "$left" | sed 's/^/  /' >&2
	return 1
}

other_types() { # the check suites in each other build type CMakeLists.txt offers, each in build-TYPE/
	local t
	for t in Debug Release MinSizeRel; do
		build "build-$t" -DCMAKE_BUILD_TYPE="$t" && tests "build-$t" -R '^check_' || return 1
	done
}

stage "build (normal)" build build
stage "Check suites and process tests" tests build -E '^valgrind_|^pg_proc_'
stage "process tests on PostgreSQL" tests build -R '^pg_proc_'
stage "process tests under valgrind" tests build -R '^valgrind_'
if [ "${1:-}" != "--quick" ]; then
	stage "build (ASan+UBSan)" build build-asan -DAGENTD_SANITIZE=ON
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
	AGENTD_TEST_SLOW=3 stage "Check suites and process tests under ASan+UBSan" tests build-asan
	unset ASAN_OPTIONS UBSAN_OPTIONS
	stage "Check suites in the other build types" other_types
	# Bounded fuzzing of every parser (libFuzzer, clang).
	stage "fuzzing (${AGENTD_FUZZ_SECS:-20} s per target)" scripts/fuzz.sh "${AGENTD_FUZZ_SECS:-20}"
fi
[ -n "${AGENTD_KEEP:-}" ] || stage "nothing left in /tmp" left_behind "$since" /tmp /dev/shm
echo "test.sh: time per stage:" >&2
printf '  %s\n' "${times[@]}" >&2
t=$((SECONDS - start))
if [ -n "$dry" ]; then
	echo "dry run: nothing was run"
else
	echo "all tests passed in $((t / 60))m$((t % 60))s"
fi
