"""Run every GPU test of the repo and print a short table (for the device machine).

    python3 tools/gpu/run_gpu_tests.py [--bench] [-k EXPR]

Uses the interpreter it is started with (on the device machine: torch 2.11 + triton)
and this checkout on PYTHONPATH, so nothing needs installing there. Logs and the
JUnit XML go to $OUT when set.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from aoti_debug.codegen.toolchain import links_libstdcxx_statically, shared_libstdcxx_compiler  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-k", default=None, help="pytest -k expression")
    p.add_argument("--bench", action="store_true", help="also run benchmarks/overhead.py (full size)")
    p.add_argument("--timeout", type=int, default=420)
    args = p.parse_args()
    out = os.environ.get("OUT") or "/tmp"
    xml = os.path.join(out, "gpu_junit.xml")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    # A compiler that finds no libstdc++.so (the device machine's /opt/gcc/bin/g++, also
    # its CXX) links libstdc++.a into every AOTI .so, which then segfaults on load
    # (tools/gpu/probe_aoti_libstdcxx.py; README "AOTInductor on the GPU machine").
    # The check and the replacement are the library's (``aoti-debug doctor`` reports the same).
    cxx = env.get("CXX") or "g++"
    if links_libstdcxx_statically(cxx):
        fix = shared_libstdcxx_compiler(exclude=shutil.which(cxx) or cxx)
        if fix:
            print(f"CXX={cxx} finds no libstdc++.so (AOTI .so files would crash on load): using {fix}")
            env["CXX"] = fix
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", f"--junitxml={xml}",
           "-o", "addopts=", "tests"]
    if args.k:
        cmd += ["-k", args.k]
    with open(os.path.join(out, "gpu_tests.log"), "w") as log:
        try:
            rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    rows = []
    if os.path.exists(xml):
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome = "passed"
            message = ""
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
                    message = (el.get("message") or "").splitlines()[0][:90] if el.get("message") else ""
            name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
            rows.append((name, outcome, float(case.get("time", 0)), message))
    print(f"pytest exit code {rc}; log: {out}/gpu_tests.log")
    print(f"{'test':<70} {'result':<8} {'s':>6}  note")
    for name, outcome, t, msg in rows:
        print(f"{name[:70]:<70} {outcome:<8} {t:6.1f}  {msg}")
    print(f"{sum(r[1] == 'passed' for r in rows)} passed, {sum(r[1] in ('FAILED', 'ERROR') for r in rows)} failed, "
          f"{sum(r[1] == 'skipped' for r in rows)} skipped")
    if args.bench:
        subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "overhead.py")], cwd=REPO, env=env)
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
