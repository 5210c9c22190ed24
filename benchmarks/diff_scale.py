"""How ``aoti-debug diff`` and ``aoti-debug show`` scale with the number of records.

Makes a level-``stats`` dump of N records (no tensor files) through the real run writer
(``RunWriter``): several graphs, each a sequence of launch sites (generated kernels and
extern ``mm``), called over and over as a model's steps are, so ``kernel_call`` grows;
each launch records its inputs ``before`` and its outputs ``after``, some with a scalar
arg. Then, each in a fresh process:

* ``diff A A``        an identical copy: must say EQUAL (exit 0);
* ``diff A P``        P is A with one value perturbed (one ``after`` record's mean and
                      checksum): must say DIFFERENT (exit 1) with that record as the first
                      divergence;
* ``show A``.

Prints wall time, CPU time (user + system: what other load on the machine changes
least) and peak RSS of each command (``os.wait4`` of the child), and their ratios to
the target (60 s and 1 GB for a million records against a million).

    .venv/bin/python benchmarks/diff_scale.py --records 1000000 --dir /tmp/aoti_scale
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

#: The target for a million records against a million.
TARGET_S = 60.0
TARGET_RSS_MB = 1024.0
TARGET_RECORDS = 1_000_000

GRAPHS = ("graph0", "graph1", "graph2")
#: Launch sites per graph.
SITES = 40


def _sites(graph_index: int) -> list[dict]:
    """A graph's launch sites: kernel name, inputs and outputs (name, shape), scalar args."""
    rng = random.Random(graph_index)
    sites = []
    for s in range(SITES):
        if s % 5 == 4:
            kernel, op = "extern_kernels.mm", "aten.mm"
        else:
            kernel = f"cpp_fused_{rng.choice(['add', 'mul_sum', 'native_layer_norm', '_softmax', 'gelu'])}_{s}"
            op = kernel
        n_in = rng.randint(1, 4)
        n_out = rng.randint(1, 2)
        shapes = [rng.choice([[64, 128], [128], [8, 64, 64], [4096], [32, 32]]) for _ in range(n_in + n_out)]
        args = [(f"buf{s * 8 + i}" if i else f"arg{graph_index}_{s}", shapes[i], "input") for i in range(n_in)]
        args += [(f"buf{s * 8 + n_in + i}", shapes[n_in + i], "output") for i in range(n_out)]
        scalars = [("ks0", 64)] if s % 7 == 3 else []
        sites.append({"kernel": kernel, "op": op, "site": s, "args": args, "scalars": scalars})
    return sites


def _stride(shape: list[int]) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _tensor(seq, launch, graph, site, call, phase, arg, role, index, shape, rng) -> dict:
    mean = rng.uniform(-1, 1)
    std = rng.uniform(0.1, 2)
    lo, hi = mean - 3 * std, mean + 3 * std
    return {"seq": seq, "launch": launch, "graph": graph, "wrapper": "python", "kernel": site["kernel"],
            "op": site["op"], "kernel_call": call, "phase": phase, "arg": arg, "role": role, "index": index,
            "site": site["site"], "kind": "tensor", "dtype": "float32", "shape": shape, "stride": _stride(shape),
            "device": "cpu", "numel": _numel(shape),
            "stats": {"min": lo, "max": hi, "mean": mean, "std": std, "absmax": max(-lo, hi), "nan": 0, "inf": 0},
            "checksum": f"{rng.getrandbits(64):016x}"}


def make_dump(path: str, records: int, seed: int = 0) -> int:
    """A stats-level run of about ``records`` records at ``path``; the records written."""
    sys.path.insert(0, REPO)
    from aoti_debug.format.writer import RunWriter, new_run_info

    rng = random.Random(seed)
    graphs = {g: _sites(i) for i, g in enumerate(GRAPHS)}
    info = new_run_info(os.path.basename(path), "stats", 0, 1, device="cpu",
                        graphs={g: {"wrapper": "python", "kind": "inference", "compile_id": f"{i}/0"}
                                for i, g in enumerate(GRAPHS)})
    w = RunWriter(path, info)
    seq = launch = 0
    calls: dict[tuple, int] = {}
    try:
        while seq < records:
            for graph, sites in graphs.items():  # one model step calls every graph once
                for site in sites:
                    if seq >= records:
                        break
                    launch += 1
                    call = calls.get((graph, site["kernel"]), 0)
                    calls[(graph, site["kernel"])] = call + 1
                    before, after = [], []
                    for index, (arg, shape, role) in enumerate(site["args"]):
                        seq += 1
                        if role == "input":
                            before.append(_tensor(seq, launch, graph, site, call, "before", arg, role, index, shape,
                                                  rng))
                        else:
                            after.append(_tensor(seq, launch, graph, site, call, "after", arg, role, index, shape,
                                                 rng))
                    for j, (arg, value) in enumerate(site["scalars"]):
                        seq += 1
                        before.append({"seq": seq, "launch": launch, "graph": graph, "wrapper": "python",
                                       "kernel": site["kernel"], "op": site["op"], "kernel_call": call,
                                       "phase": "before", "arg": arg, "role": "input",
                                       "index": len(site["args"]) + j, "site": site["site"], "kind": "symint",
                                       "dtype": "int", "value": value})
                    w.append_all(before)
                    w.append_all(after)
    finally:
        w.close()
    return seq


def perturbed_copy(src: str, dst: str) -> dict:
    """``dst``: ``src`` with the middle ``after`` record's mean and checksum changed; that record."""
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "run.json"), os.path.join(dst, "run.json"))
    with open(os.path.join(src, "manifest.jsonl"), "rb") as f:
        size = os.fstat(f.fileno()).st_size
    target = None
    with open(os.path.join(src, "manifest.jsonl"), "rb") as fin, open(os.path.join(dst, "manifest.jsonl"), "wb") as fout:
        for line in fin:
            if target is None and fin.tell() > size // 2:
                rec = json.loads(line)
                if rec.get("phase") == "after" and rec.get("kind") == "tensor":
                    rec["stats"]["mean"] += 0.5
                    rec["checksum"] = f"{(int(rec['checksum'], 16) ^ 1):016x}"
                    target = rec
                    line = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
            fout.write(line)
    assert target is not None
    return target


def measure(cmd: list[str], tree: str = REPO) -> dict:
    """Run ``cmd``: its exit code, wall time, peak RSS (MB, the child's own rusage) and output."""
    started = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=tree)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tree, env=env)
    # Drain the pipes on threads so the child never blocks, then reap it here (wait4).
    chunks: dict[str, bytes] = {}

    def drain(name, pipe):
        chunks[name] = pipe.read()

    threads = [threading.Thread(target=drain, args=(n, p)) for n, p in (("out", proc.stdout), ("err", proc.stderr))]
    for t in threads:
        t.start()
    _pid, status, usage = os.wait4(proc.pid, 0)
    for t in threads:
        t.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"rc": proc.returncode, "seconds": time.perf_counter() - started, "rss_mb": usage.ru_maxrss / 1024,
            "cpu": usage.ru_utime + usage.ru_stime,
            "stdout": chunks["out"].decode(errors="replace"), "stderr": chunks["err"].decode(errors="replace")}


def _cli() -> list[str]:
    return [sys.executable, "-m", "aoti_debug.cli"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=TARGET_RECORDS, help="records per dump (default 10^6)")
    p.add_argument("--dir", default=None, help="where to write the dumps (default: a temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the dumps (and reuse them on the next run)")
    p.add_argument("--only", choices=("same", "perturbed", "show"), action="append", default=None,
                   help="run only these measurements (repeatable)")
    p.add_argument("--tree", default=REPO,
                   help="time the aoti_debug of this source tree (e.g. an earlier commit's `git archive`)")
    args = p.parse_args(argv)
    if args.records < 100:
        p.error("--records must be at least 100")
    import tempfile

    root = args.dir or tempfile.mkdtemp(prefix="aoti_scale_")
    run_a, run_p = os.path.join(root, f"a{args.records}"), os.path.join(root, f"p{args.records}")
    made = time.perf_counter()
    if not (args.keep and os.path.isfile(os.path.join(run_p, "manifest.jsonl"))):
        for d in (run_a, run_p):
            shutil.rmtree(d, ignore_errors=True)
        os.makedirs(root, exist_ok=True)
        n = make_dump(run_a, args.records)
        target = perturbed_copy(run_a, run_p)
        with open(os.path.join(root, f"target{args.records}.json"), "w") as f:
            json.dump(target, f)
    with open(os.path.join(root, f"target{args.records}.json")) as f:
        target = json.load(f)
    with open(os.path.join(run_a, "manifest.jsonl"), "rb") as f:
        n = sum(1 for _ in f)
    made = time.perf_counter() - made
    mb = os.path.getsize(os.path.join(run_a, "manifest.jsonl")) / 1e6
    print(f"Command: `{' '.join([os.path.relpath(sys.executable, REPO), 'benchmarks/diff_scale.py', *(argv or sys.argv[1:])])}`")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}")
    print(f"dumps: {n} records each ({mb:.0f} MB manifest), ready in {made:.1f} s; perturbed seq {target['seq']} "
          f"launch {target['launch']} {target['kernel']} {target['arg']}")
    scale = args.records / TARGET_RECORDS
    rows = []
    checks = []
    wanted = args.only or ["same", "perturbed", "show"]
    for name, cmd, expect in (
        ("diff A A", [*_cli(), "diff", "--no-progress", run_a, run_a], 0),
        ("diff A P", [*_cli(), "diff", "--no-progress", run_a, run_p], 1),
        ("show A", [*_cli(), "show", run_a], 0),
    ):
        if {"diff A A": "same", "diff A P": "perturbed", "show A": "show"}[name] not in wanted:
            continue
        r = measure(cmd, os.path.abspath(args.tree))
        ok = r["rc"] == expect
        if name == "diff A P":
            line = next((l for l in r["stdout"].splitlines() if l.startswith("FIRST DIVERGENCE: ")), "")
            ok = ok and f"launch {target['launch']} " in line and target["arg"] in line
            checks.append(line)
        if not ok:
            checks.append(f"{name}: exit {r['rc']} (expected {expect})\n{r['stdout'][-2000:]}\n{r['stderr'][-2000:]}")
        rows.append((name, r, ok))
    print()
    print("| command | exit | wall s | CPU s | peak RSS MB | wall / target | RSS / target |")
    print("|---|---|---|---|---|---|---|")
    for name, r, ok in rows:
        # The time target scales with the records; the memory target does not.
        print(f"| {name} | {r['rc']}{'' if ok else ' (wrong)'} | {r['seconds']:.1f} | {r['cpu']:.1f} | {r['rss_mb']:.0f} | "
              f"{r['seconds'] / (TARGET_S * scale):.2f} | {r['rss_mb'] / TARGET_RSS_MB:.2f} |")
    print()
    print(f"target: {TARGET_S:.0f} s per {TARGET_RECORDS} records against as many ({TARGET_S * scale:.1f} s here), "
          f"{TARGET_RSS_MB:.0f} MB peak RSS")
    for line in checks:
        print(line)
    if not args.keep and args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if all(ok for _n, _r, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
