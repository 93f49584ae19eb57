#!/usr/bin/env bash
# Instructions per agent run (scripted model, the shared harness's shelfhand adapter), counted
# by valgrind's callgrind for one or two checkouts: unlike CPU time, the count does not move
# with what else the machine runs, so a refactor can be compared on a busy machine. Each tree
# runs in its own process twice, with 100 and with 600 timed runs (after the same warm-up);
# the difference over 500 runs is what one run executes. PYTHONHASHSEED is fixed (0) because
# the count depends on the string-hash seed (dict and type-cache layouts). Every tree runs with
# this checkout's bench adapters: the instrument stays the same, only the library changes.
#
#   bench/agent_instructions.sh CALLS TREE [TREE ...]   # e.g. 1 . /tmp/wt-before
#   ADAPTER=fw_shelfhand bench/agent_instructions.sh 1 .  # the sync tool on a worker thread
#
# ADAPTER is the harness adapter module (default fw_shelfhand_inline: the tool runs on the
# loop); callgrind counts every thread, so the worker thread's instructions are included, the
# time the threads wait for each other (the kernel's wake-ups) is not.
#
# Needs valgrind (apt-get install valgrind) and the shared agent harness
# (SHELFHAND_AGENT_HARNESS, default ../shared/bench/agent). About a minute per tree.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(python -c 'import sys; print(sys.executable)')
harness=${SHELFHAND_AGENT_HARNESS:-../shared/bench/agent}
calls=$1
adapter=${ADAPTER:-fw_shelfhand_inline}
shift
cell='
import asyncio, gc, sys
bench, harness, calls, n, adapter = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
sys.path[:0] = [bench, harness]
import importlib
fw = importlib.import_module(adapter)
run = fw.make_runner(calls, 1)
async def many(k):
    for _ in range(k):
        await run()
asyncio.run(many(20)); gc.collect(); gc.freeze()
asyncio.run(many(n))
'
count() {  # tree runs -> instructions of the whole process
  PYTHONHASHSEED=0 PYTHONPATH="$1/src" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "$py" -c "$cell" "$PWD/bench" "$harness" "$calls" "$2" "$adapter" 2>&1 >/dev/null |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
for tree in "$@"; do
  low=$(count "$tree" 100)
  high=$(count "$tree" 600)
  echo "$tree $adapter calls=$calls instructions/run=$(((high - low) / 500))"
done
