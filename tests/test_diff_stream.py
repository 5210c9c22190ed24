"""Runs in step are diffed in one pass over both manifests (align.StreamAligner); the result
is the one pairing by index gives (align.Aligner), in step or not."""

from __future__ import annotations

import json
import os

import pytest

from aoti_debug.compare import align, diff
from aoti_debug.compare.align import Aligner, OutOfStep, StreamAligner
from aoti_debug.format.reader import RunReader
from aoti_debug.format.writer import RunWriter, new_run_info

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it

KERNELS = ("cpp_fused_add_0", "extern_kernels.mm", "cpp_fused_mul_1", "graph_inputs")


def _records(calls: int = 3) -> list[dict]:
    """A model's calls: every kernel of KERNELS per call, two inputs before, one output after."""
    recs, seq, launch = [], 0, 0
    for call in range(calls):
        for site, kernel in enumerate(KERNELS):
            launch += 1
            op = "aten.mm" if kernel.startswith("extern") else kernel
            for index, (phase, role, arg) in enumerate((("before", "input", f"arg{site}"),
                                                        ("before", "input", f"buf{site}"),
                                                        ("after", "output", f"buf{site + 10}"))):
                seq += 1
                value = float(seq % 7)
                recs.append({"seq": seq, "launch": launch, "graph": "graph0", "wrapper": "python", "kernel": kernel,
                             "op": op, "kernel_call": call, "phase": phase, "arg": arg, "role": role,
                             "index": index, "kind": "tensor", "dtype": "float32", "shape": [4], "stride": [1],
                             "device": "cpu", "numel": 4,
                             "stats": {"min": value, "max": value + 1, "mean": value + 0.5, "std": 0.5,
                                       "absmax": value + 1, "nan": 0, "inf": 0},
                             "checksum": f"{seq:016x}"})
    return recs


def _run(path, recs: list[dict], tail: bytes = b"") -> str:
    w = RunWriter(str(path), new_run_info(os.path.basename(str(path)), "stats", 0, 1, device="cpu"))
    w.append_all(recs)
    if tail:
        w.append_text(tail)
    w.close()
    return str(path)


def _same_but_seconds(x: dict, y: dict) -> None:
    x, y = dict(x), dict(y)
    x.pop("seconds")
    y.pop("seconds")
    assert x == y


def _indexed(monkeypatch, a: str, b: str, **kwargs) -> dict:
    """``diff`` with every pair of runs taken as out of step: paired by index."""
    def never(self):
        raise OutOfStep("forced")
        yield  # pragma: no cover

    with monkeypatch.context() as m:
        m.setattr(StreamAligner, "launches", never)
        return diff(a, b, **kwargs).to_dict()


def _perturbed(recs: list[dict]) -> list[dict]:
    recs = json.loads(json.dumps(recs))
    recs[20]["stats"]["mean"] += 1  # an output of launch 7
    recs[20]["checksum"] = "f" * 16
    return recs


def _interleaved(recs: list[dict]) -> list[dict]:
    # Two launches of concurrent threads: the first line of launch 3 after launch 2's.
    recs = list(recs)
    recs[3], recs[6] = recs[6], recs[3]
    return recs


CASES = {
    "equal": lambda r: (r, r),
    "perturbed": lambda r: (r, _perturbed(r)),
    "b has one more call": lambda r: (r[:-12], r),
    "a has one more call": lambda r: (r, r[:-12]),
    "b lacks a launch": lambda r: (r, r[:3] + r[6:]),
    "a interleaved": lambda r: (_interleaved(r), r),
    "b interleaved": lambda r: (r, _interleaved(r)),
    "launches out of order": lambda r: (r[12:24] + r[:12] + r[24:], r),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kernels", [None, "cpp_*"])
def test_stream_gives_what_pairing_by_index_gives(tmp_path, monkeypatch, case, kernels):
    recs_a, recs_b = CASES[case](_records())
    a, b = _run(tmp_path / "a", recs_a), _run(tmp_path / "b", recs_b)
    streamed = diff(a, b, kernels=kernels).to_dict()
    _same_but_seconds(streamed, _indexed(monkeypatch, a, b, kernels=kernels))
    assert streamed["records"] and streamed["launches"]


def test_damage_is_told_once_whichever_way_the_runs_pair(tmp_path, monkeypatch):
    recs = _records()
    a = _run(tmp_path / "a", recs)
    # A damaged line, then one out of step, then a truncated last line.
    b = _run(tmp_path / "b", recs[:5] + [dict(recs[5], seq=-1)] + _interleaved(recs)[6:], tail=b'{"seq": 9')
    streamed = diff(a, b).to_dict()
    _same_but_seconds(streamed, _indexed(monkeypatch, a, b))
    assert len([p for p in streamed["problems"] if "line 6" in p]) == 1, streamed["problems"]
    assert len([n for n in streamed["notes"] if "truncated" in n]) == 1, streamed["notes"]


def _launches(aligner) -> list[tuple]:
    out = [(p.launch_a, p.launch_b, [(x.a and x.a.seq, x.b and x.b.seq, x.how) for x in p.pairs], p.end_offset)
           for p in aligner.launches()]
    return out + [(p.launch_a, p.launch_b, [(x.a and x.a.seq, x.b and x.b.seq, x.how) for x in p.pairs])
                  for p in aligner.only_in_b()]


def test_in_step_runs_pair_in_one_pass_as_the_indexed_aligner_does(tmp_path):
    recs = _records()
    a, b = _run(tmp_path / "a", recs), _run(tmp_path / "b", recs[:-12] + recs[-9:])
    with RunReader(a) as ra, RunReader(b) as rb, RunReader(a) as ia, RunReader(b) as ib:
        with pytest.raises(OutOfStep):  # B lacks a launch of A's last call
            _launches(StreamAligner(ra, rb))
    b = _run(tmp_path / "c", recs[:-12])
    with RunReader(a) as ra, RunReader(b) as rb, RunReader(a) as ia, RunReader(b) as ib:
        assert _launches(StreamAligner(rb, ra)) == _launches(Aligner(ib, ia))  # B's last call only in B
        with pytest.raises(OutOfStep):
            _launches(StreamAligner(RunReader(b), RunReader(a), exact=True))


def test_out_of_step_runs_are_indexed_by_the_same_pass(tmp_path, monkeypatch):
    recs = _records()
    a, b = _run(tmp_path / "a", recs), _run(tmp_path / "b", _interleaved(recs))
    seen = {"a": 0, "b": 0}
    scans = []
    real_scan = RunReader.scan

    def counted(self):
        scans.append(self.path)
        return real_scan(self)

    monkeypatch.setattr(RunReader, "scan", counted)
    with RunReader(a) as ra, RunReader(b) as rb, RunReader(a) as ia, RunReader(b) as ib:
        stream = StreamAligner(ra, rb, seen=(lambda r: seen.__setitem__("a", seen["a"] + 1),
                                             lambda r: seen.__setitem__("b", seen["b"] + 1)))
        with pytest.raises(OutOfStep):
            _launches(stream)
        indexed = stream.aligner()
        assert scans == [a, b]  # one scan of each, to the end
        assert seen == {"a": len(recs) - 9, "b": len(recs) - 9}  # every line but graph_inputs', once
        assert _launches(indexed) == _launches(Aligner(ia, ib))
    assert align._MEMO_KERNELS > len(KERNELS)
