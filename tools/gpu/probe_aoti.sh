#!/usr/bin/env bash
# Why does loading an AOTInductor package segfault on the device machine?
# Prints the compiler wrapper, a CPU-only AOTI load, and a native backtrace of the CUDA load.
set -u
echo "== compiler wrapper"; cat /opt/gcc/bin/g++; echo
echo "== CPU AOTI package on this machine"
PYTHONUNBUFFERED=1 timeout 200 python3 tools/gpu/probe_aoti.py cpu 2>&1 | grep "^\[probe\] \(loading\|loaded\|ran\|compiled\)\|Fatal\|Error" | head
echo "== CUDA AOTI package under cuda-gdb"
PYTHONUNBUFFERED=1 timeout 300 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt -ex "info sharedlibrary" --args python3 tools/gpu/probe_aoti.py cuda 2>&1 \
  | grep -v "^\[New Thread\|^\[Thread\|Warning\|warn" | grep -A40 "SIGSEGV\|signal" | head -80
