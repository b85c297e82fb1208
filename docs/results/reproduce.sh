#!/usr/bin/env bash
# Reproduces docs/results: every paper policy against EASY on the four archive
# traces, with the exact options used. Run from the checkout with ../shared beside
# it, after scripts/setup. Takes about an hour on a 2-core machine.
#
# --malleable   every job may be shrunk (FCFS-malleable paper: "all the jobs are
#               candidate to be shrunk"); only fcfs-malleable uses it.
# --deadlines   70 % of jobs get a deadline (EG-EDF paper, sec. 4), slack 1.5-4
#               times the wall time, seed 0 (workload/deadlines.py); only flexible,
#               eg-edf and eg-edf-tabu use deadlines, every policy is scored on them.
set -euo pipefail
cd "$(dirname "$0")/../.."
POLICIES=easy,dpsa-p,dpsa-n,dpsa-w,fcfs-malleable,flexible,eg-edf,eg-edf-tabu
for trace in CTC-SP2-1996-3.1-cln KTH-SP2-1996-2.1-cln SDSC-SP2-1998-4.2-cln SDSC-BLUE-2000-4.2-cln; do
  out=docs/results/$trace
  mkdir -p "$out"
  .venv/bin/accordion compare "../shared/workloads/pwa/$trace.swf.gz" \
    --policies "$POLICIES" --malleable --deadlines 0.7 --deadline-slack 1.5:4 --seed 0 \
    --no-per-job --no-progress --out "$out" | tee "$out/table.txt"
done
