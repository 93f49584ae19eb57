#!/usr/bin/env bash
# Instructions per run of bench/delegation.py's cases, counted by valgrind's callgrind: unlike
# CPU time, the count does not move with what else the machine runs. Each case runs in its own
# process twice, with 60 and with 260 timed runs (plus the same warm-up); the difference over
# 200 runs is what one run executes. The count still depends on the string-hash seed of the
# process (dict and type-cache layouts), so it is taken per PYTHONHASHSEED.
#
#   bench/delegation_instructions.sh [SEED ...]        # default: seed 0
#   BENCH_ARGS=--keep-every-request bench/delegation_instructions.sh 0   # models keep every request
#
# Needs valgrind (apt-get install valgrind). About a minute per case and seed on a quiet core.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(python -c 'import sys; print(sys.executable)')  # the interpreter itself, not a shim script
cases=(single supervisor single_stream supervisor_stream)

count() {  # seed case runs -> instructions of the whole process
  PYTHONHASHSEED=$1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "$py" bench/delegation.py --only "$2" --repeats 1 --runs "$3" ${BENCH_ARGS:-} 2>&1 >/dev/null |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

printf '%-6s' seed
printf ' %18s' "${cases[@]}"
printf ' %10s %10s\n' run_ratio str_ratio
for seed in "${@:-0}"; do
  per_run=()
  for case in "${cases[@]}"; do
    low=$(count "$seed" "$case" 60)
    high=$(count "$seed" "$case" 260)
    per_run+=($(((high - low) / 200)))
  done
  printf '%-6s' "$seed"
  printf ' %18s' "${per_run[@]}"
  awk -v a="${per_run[0]}" -v b="${per_run[1]}" -v c="${per_run[2]}" -v d="${per_run[3]}" \
    'BEGIN { printf " %9.3fx %9.3fx\n", b / a, d / c }'
done
