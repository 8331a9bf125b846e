#!/usr/bin/env bash
# Install what is missing, build, and start agentd in the foreground on its
# embedded default: LMDB in ./agentd-data, the built-in echo model, no config.
# Extra arguments go to agentd (see agentd --help). The build's progress is
# shown (the first build takes about a minute on 2 cores); AGENTD_BUILD_DIR
# picks another build directory than build/. A new build directory gets the
# default build type (RelWithDebInfo); one already configured keeps its own
# type and options.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
dir=${AGENTD_BUILD_DIR:-build}
echo "run.sh: configuring and building in $dir/" >&2
cmake -S . -B "$dir" >/dev/null
cmake --build "$dir" -j "$(nproc 2>/dev/null || echo 2)" >&2
echo "run.sh: starting $dir/agentd $*" >&2
exec "$dir/agentd" "$@"
