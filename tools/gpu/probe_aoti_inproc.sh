#!/usr/bin/env bash
# Does an AOTI package crash when loaded in the process that compiled it (as the locate
# examples do), uninstrumented and at level names? A native backtrace of the first crash.
set -u
# CXX as given (the device machine sets CXX=/opt/gcc/bin/g++); tools/gpu/run_gpu_tests.py swaps it
echo "CXX=${CXX:-unset}"
export PYTHONUNBUFFERED=1
for level in off names; do
  echo "== examples/locate_ima_indexing.py --wrapper aoti --no-fault, level $level"
  if [ $level = off ]; then unset AOTI_DEBUG_LEVEL; else export AOTI_DEBUG_LEVEL=$level; fi
  timeout 240 python3 -X faulthandler examples/locate_ima_indexing.py --wrapper aoti --no-fault > /tmp/inproc_$level.log 2>&1
  rc=$?
  echo "rc=$rc"; grep -v "^W1\|Warning\|warn" /tmp/inproc_$level.log | tail -12
  if [ $rc -ne 0 ] && [ -z "${DONE_GDB:-}" ]; then
    DONE_GDB=1
    echo "== under cuda-gdb"
    timeout 300 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex "bt 30" --args python3 examples/locate_ima_indexing.py --wrapper aoti --no-fault 2>&1 \
      | grep -v "^\[New Thread\|^\[Thread\|^\[Detaching\|Warning\|warn" | grep -A45 "SIGSEGV\|SIGABRT\|signal" | head -60
  fi
done
