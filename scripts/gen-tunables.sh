#!/usr/bin/env bash
# Regenerates docs/tuning.md's table of tunables from the table
# common/config.c reads them with: builds tests/docs/tunables_md.c (linked
# against hk_common) and rewrites the block between docs/tuning.md's
# "<!-- tunables:begin" and "<!-- tunables:end" lines. The ctest
# docs_tunables fails until this has been run after a change to the table.
#   scripts/gen-tunables.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$dir" --target tunables_md >/dev/null
"$dir/tests/tunables_md" --write docs/tuning.md
echo "docs/tuning.md: table of tunables regenerated from common/config.c"
