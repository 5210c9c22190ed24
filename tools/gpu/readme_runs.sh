#!/bin/bash
# The GPU runs behind the README's overhead table, one call of the device tool each (each
# fits its 10 minutes: ~6 for a Python chunk, whose save and built-in rows are the longest;
# C++ rows compile for a minute each), all on one machine, one after another:
#
#   bash tools/gpu/readme_runs.sh resnet18-python     # then: transformer-python, resnet18-cpp, ...
#
# Each writes $OUT/<chunk>.json (overhead.py --json); copy them to benchmarks/results/
# as h200_<chunk>.json and run `python benchmarks/readme_table.py --write README.md`.
# The device machine's copy of the tree may carry stale git metadata: give the commit
# that ran as BENCH_COMMIT (benchmarks/saved_runs.py records it instead of asking git).
set -euo pipefail
chunk=${1:?a chunk: resnet18-python, transformer-python, resnet18-cpp, transformer-cpp, resnet18-aoti, transformer-aoti}
# The device machine sets CXX to a g++ that links libstdc++ statically (AOTI packages crash on
# load): /usr/bin/g++ always.
export CXX=/usr/bin/g++ PYTHONPATH=. PYTHONUNBUFFERED=1
model=${chunk%%-*}
wrapper=${chunk#*-}
case $wrapper in
  python) extra=(--cudagraphs --only "ours 3 names,ours 4 stats,ours 2 print,ours 1 save,built-in 2 print,built-in 1 save") ;;
  cpp)    extra=(--steps 10 --only "ours 3 names,ours 4 stats,ours 2 print") ;;
  aoti)   extra=(--steps 10 --only "ours 3 names,ours 4 stats") ;;
  *) echo "readme_runs.sh: unknown wrapper in chunk '$chunk'" >&2; exit 2 ;;
esac
# --paired 1: the cheap levels' ratios to a base timed in turn in their own process (the
# host's step moves from process to process by more than they cost).
python3 benchmarks/overhead.py --model "$model" --wrapper "$wrapper" "${extra[@]}" --paired 1 \
  --time-limit 540 --row-timeout 150 --format markdown --json "${OUT:-/tmp}/$chunk.json"
