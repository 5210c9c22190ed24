"""``aoti-debug repro``: one launch as a directory that reproduces it with torch alone.

::

    DIR/run.py          loads the inputs, runs the kernel, compares with the expected outputs
    DIR/kernel.py       the launch cut out of the generated wrapper (:mod:`.program`)
    DIR/kernel.cpp|.triton.py   the kernel's own source, to read
    DIR/inputs/*.pt     the values the launch is fed
    DIR/expected/*.pt   the reference's outputs (``--reference``), else the run's own
    DIR/recorded/*.pt   what the kernel wrote in the recorded run
    DIR/meta.json       the launch, its values' dtypes, shapes and strides, the tolerances
    DIR/README.md       what it is and where it came from
    DIR/.aoti_debug_repro   the marker that lets a later ``--force`` replace DIR

``python DIR/run.py`` needs torch (and Triton for a Triton kernel), not aoti_debug and
not the model: it prints, per output, the error against the expected value and exits 1
when an output is beyond tolerance (the divergence reproduced), 0 when all agree.
With ``--reference`` the inputs are the reference's (as :func:`replay` feeds them), so
the repro shows the kernel's own error; without, the run's own inputs and outputs.

``-o DIR`` never replaces what repro did not write: never the dump (nor a directory
inside it or holding it), and with ``--force`` only a directory that holds a previous
repro's marker. Names from the dump reach ``run.py`` and ``kernel.py`` only as literals
(:mod:`.safe`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat

from ..compare import verdict as _verdict
from ..compare.metrics import tolerance
from ..errors import DumpError
from ..format.reader import RunReader
from .engine import LaunchReplay, _counterparts, _Replayer, launch_records
from .program import program
from .safe import ReplayError, py_literal, shown
from .trust import Sources

#: The file that marks a directory as written by repro (``--force`` replaces only those).
MARKER = ".aoti_debug_repro"

#: The script written as DIR/run.py (torch only: it must run without aoti_debug).
RUN_PY = r'''{doc}
import importlib.util
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
META = json.load(open(os.path.join(HERE, "meta.json")))


def tensor(spec, values):
    out = torch.empty_strided(spec["shape"], spec["stride"], dtype=getattr(torch, spec["dtype"]),
                              device=spec["device"])
    if values is None:
        return out.zero_()
    try:
        return out.copy_(values.reshape(spec["shape"]))
    except RuntimeError:  # an expanded (overlapping) layout: keep the values, dense
        return values.to(device=out.device, dtype=out.dtype)


def load(rel):
    return torch.load(os.path.join(HERE, rel), map_location="cpu", weights_only=True)


def value(spec):
    if spec["kind"] == "tensor":
        return tensor(spec, load(spec["file"]) if spec.get("file") else None)
    if spec["kind"] == "list":
        return [value(s) for s in spec["items"]]
    return spec.get("value")


def main():
    if any(s.get("device", "cpu").startswith("cuda") for s in META["params"]) and not torch.cuda.is_available():
        sys.exit("this launch ran on CUDA; run it on a machine with a CUDA device")
    spec = importlib.util.spec_from_file_location("kernel", os.path.join(HERE, "kernel.py"))
    kernel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernel)
    outputs = kernel.launch(*[value(s) for s in META["params"]])
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    print(f"{{META['kernel']}} (launch {{META['launch']}}), expected values: {{META['expected_from']}}")
    bad = 0
    for o in META["outputs"]:
        got = outputs[o["arg"]].detach().cpu()
        want = load(o["expected"])
        got = got.to(want.dtype).reshape(want.shape)
        finite = torch.isfinite(got) & torch.isfinite(want)
        diff = (got.double() - want.double())[finite]
        rms = diff.pow(2).mean().sqrt().item() if diff.numel() else 0.0
        max_abs = diff.abs().max().item() if diff.numel() else 0.0
        nonfinite = (torch.isnan(got) != torch.isnan(want)).any().item() or (torch.isinf(got) != torch.isinf(want)).any().item()
        if o.get("eager_error") is not None:  # an fp64 reference: judged against eager's own error
            eager = float(o["eager_error"])
            finite_want = want.double()[torch.isfinite(want)]
            ref_rms = finite_want.pow(2).mean().sqrt().item() if finite_want.numel() else 0.0
            factor = float(o.get("factor", META["rounding_factor"]))
            if not math.isfinite(eager):  # eager itself is NaN/Inf where float64 is not: nothing to hold against
                ratio, failed = math.nan, False
            elif nonfinite or not math.isfinite(rms):
                ratio, failed = math.inf, True
            else:
                scale = max(eager, float(o["eps"]) * ref_rms / math.sqrt(12.0))
                ratio = (0.0 if rms == 0 else math.inf) if scale == 0 else rms / scale
                failed = ratio > factor
            how = f"{{ratio:.3g}}x eager's own error (limit {{factor:g}})"
        else:
            atol, rtol = float(o["atol"]), float(o["rtol"])
            if math.isinf(atol) or math.isinf(rtol):  # any finite difference is within tolerance
                failed = nonfinite
            else:
                close = torch.isclose(got.double(), want.double(), rtol=rtol, atol=atol, equal_nan=True)
                failed = nonfinite or not bool(close.all())
            how = f"atol={{atol:g}} rtol={{rtol:g}}"
        bad += failed
        print(f"  {{o['arg']}}: rms error {{rms:.3g}}, max abs {{max_abs:.3g}}, {{how}}: "
              f"{{'MISMATCH' if failed else 'ok'}}")
    print("reproduced: the kernel's output differs from the expected values" if bad
          else "not reproduced: every output agrees with the expected values")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
'''


def _spec(value, files: dict, folder: str, name: str) -> dict:
    import torch

    if isinstance(value, list):
        return {"kind": "list", "items": [_spec(v, files, folder, f"{name}_{i}") for i, v in enumerate(value)]}
    if isinstance(value, torch.Tensor):
        rel = f"{folder}/{name}.pt"
        files[rel] = value.detach().to("cpu").contiguous()
        return {"kind": "tensor", "dtype": str(value.dtype).replace("torch.", ""), "shape": list(value.shape),
                "stride": list(value.stride()), "device": str(value.device), "file": rel}
    return {"kind": "scalar" if value is not None else "none", "value": value}


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_out_dir(out_dir: str, dumps, force: bool) -> bool:
    """Whether ``out_dir`` may be written (True: a previous repro there is to be replaced).

    Raises:
        ReplayError: ``out_dir`` is, holds or lies inside one of ``dumps``, is not a
            directory, or is not empty and (without ``force``, or without repro's
            marker) not repro's to replace.
    """
    out = os.path.realpath(out_dir)
    for d in dumps:
        real = os.path.realpath(d)
        if _inside(out, real) or _inside(real, out):
            how = "is" if out == real else ("is inside" if _inside(out, real) else "holds")
            raise ReplayError(f"-o {shown(out_dir)} {how} the dump {shown(d)}: write the repro outside it")
    if os.path.islink(out_dir):
        raise ReplayError(f"-o {shown(out_dir)} is a symbolic link: give the directory itself")
    if not os.path.lexists(out_dir):
        return False
    if not os.path.isdir(out_dir):
        raise ReplayError(f"-o {shown(out_dir)} exists and is not a directory")
    if not os.listdir(out_dir):
        return False
    if not force:
        raise ReplayError(f"{shown(out_dir)} exists and is not empty: give another -o, or --force to replace a "
                          f"previous repro")
    try:
        marked = stat.S_ISREG(os.lstat(os.path.join(out_dir, MARKER)).st_mode)
    except OSError:
        marked = False
    if not marked:
        raise ReplayError(f"--force replaces only a previous repro: {shown(out_dir)} holds no {MARKER} marker, "
                          f"so aoti-debug did not write it; give another -o")
    return True


def write_repro(dump, launch: int, out_dir: str, reference=None, force: bool = False, trust: bool = False,
                confirm=None, say=None) -> str:
    """Writes launch ``launch`` of ``dump`` as a repro directory (see the module's docstring).

    Args:
        force: replace ``out_dir`` if it holds a previous repro (its marker file).
        trust, confirm, say: who may run the dump's generated code (:class:`.trust.Sources`).

    Returns the directory. Raises ReplayError / DumpError with what is missing.
    """
    import torch

    ra = dump if isinstance(dump, RunReader) else RunReader(str(dump))
    rb = None if reference is None else (reference if isinstance(reference, RunReader) else RunReader(str(reference)))
    try:
        # Before anything is read or run: -o must not be (or hold) a dump it reads.
        dumps = [str(dump) if not isinstance(dump, RunReader) else ra.path, ra.path]
        if rb is not None:
            dumps += [str(reference) if not isinstance(reference, RunReader) else rb.path, rb.path]
        replace = check_out_dir(out_dir, dumps, force)
        by_launch = launch_records(ra, launch)
        records = by_launch.get(launch)
        if not records:
            raise DumpError(f"{ra.path} has no launch {launch}")
        sources = Sources(ra, trust=trust, confirm=confirm, say=say)
        sources.vouch({r.graph for r in records})
        prog = program(sources, records)
        paired = _counterparts(ra, rb, by_launch, sources)
        replayer = _Replayer(ra, rb if rb is not None else ra, None, None, None, sources)
        lr = LaunchReplay(launch, records[0].graph, records[0].kernel, "")
        values = replayer.inputs(prog, paired, lr)
        files: dict[str, torch.Tensor] = {}
        params = [_spec(values[p], files, "inputs", p) for p in prog.params]
        outputs, missing = [], []
        for rec in records:
            if rec.phase != "after" or rec.kind != "tensor" or rec.volatile:
                continue
            source_reader, want = (rb, paired.get(rec.seq)) if rb is not None else (ra, rec)
            expected = replayer._load(source_reader, want) if want is not None else None
            if expected is None:
                missing.append(rec.arg)
                continue
            name = _file_name(rec.arg)
            files[f"expected/{name}.pt"] = expected
            atol, rtol = tolerance(rec.dtype, None, None)
            entry = {"arg": rec.arg, "expected": f"expected/{name}.pt", "atol": atol, "rtol": rtol,
                     "eager_error": None, "eps": 0.0}
            if _verdict.applies(want):
                entry["eager_error"] = _verdict._number(want.eager_error)
                entry["eps"] = _verdict._EPS.get(want.model_dtype or "", 0.0)
                entry["factor"] = _verdict.factor_for(want.model_dtype)
            recorded = replayer._load(ra, rec)
            if recorded is not None:
                files[f"recorded/{name}.pt"] = recorded
                entry["recorded"] = f"recorded/{name}.pt"
            outputs.append(entry)
        if not outputs:
            raise ReplayError(f"no output of launch {launch} has expected values "
                              f"({'the reference has none for ' if rb is not None else 'no tensor files for '}"
                              f"{', '.join(missing) or 'any'}): record at level save")
        # Everything is read: only now is a previous repro replaced (never anything else).
        if replace:
            shutil.rmtree(out_dir)
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, MARKER), "w") as f:
            f.write("written by aoti-debug repro; `aoti-debug repro --force` may replace this directory\n")
        for rel, t in files.items():
            os.makedirs(os.path.join(out_dir, os.path.dirname(rel)), exist_ok=True)
            torch.save(t, os.path.join(out_dir, rel))
        origin = ra.provenance(records[0])
        meta = {
            "kernel": prog.kernel, "launch": launch, "graph": records[0].graph, "run": ra.path,
            "generated_source": prog.origin, "wrapper": prog.wrapper,
            "expected_from": f"reference {rb.path}" if rb is not None else f"the recorded run {ra.path}",
            "inputs_from_reference": lr.from_b, "inputs_from_run": lr.own,
            "rounding_factor": _verdict.ROUNDING_FACTOR, "params": params, "outputs": outputs,
            "unexpected_outputs": missing,
            "provenance": None if origin is None else {
                "module": origin.module, "source": origin.source, "aten": list(origin.aten), "nodes": list(origin.nodes)},
        }
        with open(os.path.join(out_dir, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1, default=str)
        with open(os.path.join(out_dir, "kernel.py"), "w", encoding="utf-8") as f:
            f.write(f"{py_literal(f'{prog.kernel}: launch {launch} of {ra.path}, cut out of {prog.origin}')}\n")
            f.write(prog.module_source())
        if prog.kernel_source:
            ext = "cpp" if prog.wrapper == "cpp" or "#include" in prog.kernel_source else "triton.py"
            with open(os.path.join(out_dir, f"kernel.{ext}"), "w", encoding="utf-8") as f:
                f.write(prog.kernel_source)
        with open(os.path.join(out_dir, "run.py"), "w", encoding="utf-8") as f:
            doc = f"Reproduces launch {launch} ({prog.kernel}) of {os.path.basename(ra.path)}: see README.md. " \
                  f"Needs torch only."
            f.write(RUN_PY.format(doc=py_literal(doc)))
        with open(os.path.join(out_dir, "README.md"), "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(_readme(meta, prog))
        return out_dir
    finally:
        ra.close()
        if rb is not None:
            rb.close()


def _file_name(arg: str) -> str:
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in arg)


def _readme(meta: dict, prog) -> str:
    prov = meta.get("provenance") or {}
    lines = [
        f"# {meta['kernel']}: launch {meta['launch']} of {os.path.basename(meta['run'])}",
        "",
        "    python run.py     # exit 1: the divergence is reproduced; 0: every output agrees",
        "",
        f"- kernel and launch code: `kernel.py` (cut out of `{meta['generated_source']}`)",
        f"- expected outputs: {meta['expected_from']}",
        f"- inputs fed from the reference: {', '.join(meta['inputs_from_reference']) or '-'}",
        f"- inputs fed from the run: {', '.join(meta['inputs_from_run']) or '-'}",
    ]
    if prov:
        lines += [
            f"- made from: {', '.join(prov.get('nodes') or []) or '-'} "
            f"(ATen: {', '.join(prov.get('aten') or []) or '-'})",
            f"- in the model: {prov.get('module') or '-'} at {prov.get('source') or '-'}",
        ]
    if meta["unexpected_outputs"]:
        lines.append(f"- outputs without expected values (not checked): {', '.join(meta['unexpected_outputs'])}")
    return "\n".join(lines) + "\n"
