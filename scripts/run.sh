#!/usr/bin/env bash
# Install what is missing, build, and start agentd in the foreground on its
# embedded default: LMDB in ./agentd-data, the built-in echo model, no config.
# Extra arguments go to agentd (see agentd --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
exec build/agentd "$@"
