"""``aoti-debug diff --plot`` and :mod:`aoti_debug.compare.plot`: which values are drawn
where, on hand-built results, and the pictures of real dumps through the CLI."""

from __future__ import annotations

import collections
import json
import math
import sys
import xml.etree.ElementTree as ET

import pytest

import aoti_debug
from aoti_debug.compare.metrics import Metrics
from aoti_debug.compare.plot import MAX_GROUPS, OTHER, group_of, plot_diff, plot_format, plot_points, ranked_groups
from aoti_debug.compare.result import DiffResult, FirstDivergence, RecordComparison
from aoti_debug.errors import PlotError
from aoti_debug.format.schema import Record, RunInfo
from tests.test_cli_diff import diff, error_line
from tests.test_compare import build_real_dumps

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return build_real_dumps(tmp_path_factory)


def svg_texts(path) -> list[str]:
    """The text of every ``<text>`` element of an SVG (which must parse as XML)."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG_NS}svg"
    return ["".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")]


# -- hand-built results --------------------------------------------------------------------------
_seq = iter(range(10**6))


def pair(status: str, launch: int, kernel: str, phase: str = "after", graph: str = "graph0", **metrics) -> RecordComparison:
    """A comparison of two identical-looking records; pass/fail ones carry ``metrics``."""
    seq = next(_seq)
    a, b = (Record(seq=seq, launch=launch, graph=graph, wrapper="python", kernel=kernel, op=kernel, kernel_call=0,
                   phase=phase, arg=f"buf{seq}", role="output" if phase == "after" else "input", dtype="float32",
                   shape=[4], numel=4) for _ in range(2))
    m = Metrics(basis="values", passed=status == "pass", **metrics) if status in ("pass", "fail") else None
    return RecordComparison(status, a, b, m)


def result_of(pairs: list[RecordComparison], first: FirstDivergence | None = None) -> DiffResult:
    info = RunInfo(format_version=1, run_id="run", level="save", pid=1, start_time="")
    return DiffResult(path_a="/dumps/a/run", path_b="/dumps/b/run", info_a=info, info_b=info, records=pairs,
                      counts=dict(collections.Counter(rc.status for rc in pairs)), basis={"values": len(pairs)},
                      first_divergence=first)


def test_group_of_is_the_kernel_stem_or_the_module():
    rc = pair("pass", 1, "triton_poi_fused_add_12")
    assert group_of(rc) == "graph0 triton_poi_fused_add"
    assert group_of(pair("pass", 1, "extern_kernels.addmm", graph="")) == "extern_kernels.addmm"
    rc.module = "model.layers.3.mlp"  # provenance, where a record carries it
    assert group_of(rc) == "model.layers.3.mlp"


def test_points_are_compared_outputs_in_their_bands():
    pairs = [
        pair("pass", 1, "k_0", max_abs=0.0, max_rel=0.0),
        pair("fail", 2, "k_1", "before", max_abs=0.5, max_rel=0.5),  # an input: drawn as the earlier output
        pair("fail", 2, "k_1", max_abs=0.25, max_rel=math.inf),      # B is 0 where A is not
        pair("fail", 3, "k_2", max_abs=1e-3, max_rel=1e-2, nan_a=2, nan_b=0),
        pair("fail", 4, "k_3", max_abs=None, max_rel=None),           # a non-numeric scalar differs
        pair("pass", 5, "k_4", max_abs=None, max_rel=None),
        *(pair(s, 6, "k_5") for s in ("volatile", "uninitialised", "ignored", "unpaired", "only_a", "mismatch")),
    ]
    points, phase = plot_points(result_of(pairs))
    assert phase == "after"
    assert [p.launch for p in points] == [1, 2, 3, 4, 5]
    bands = [(p.error("max_abs")[0], p.error("max_rel")[0]) for p in points]
    assert bands == [("zero", "zero"), ("value", "special"), ("special", "special"), ("special", "special"),
                     ("zero", "zero")]
    assert points[1].error("max_abs") == ("value", 0.25) and points[1].failed

    inputs_only, phase = plot_points(result_of([pair("fail", 2, "k_1", "before", max_abs=0.5, max_rel=0.5)]))
    assert phase == "before" and len(inputs_only) == 1


def test_legend_groups_are_bounded_failing_first():
    pairs = [pair("pass", i, f"kernel{i}_0", max_abs=1e-9 * (i + 1), max_rel=0.0) for i in range(20)]
    pairs.append(pair("fail", 30, "late_failure_0", max_abs=1e-6, max_rel=1e-6))
    points, _ = plot_points(result_of(pairs))
    groups = ranked_groups(points)
    assert len(groups) == MAX_GROUPS
    assert "graph0 late_failure" in groups and "graph0 kernel19" in groups and "graph0 kernel0" not in groups
    firsts = {p.group: p.launch for p in reversed(points)}
    assert [firsts[g] for g in groups] == sorted(firsts[g] for g in groups)  # in launch order


def test_plot_diff_on_a_hand_built_result(tmp_path):
    pairs = [pair("pass", i, f"cpp_fused_k{i}_{i}", max_abs=10.0 ** -(i % 7), max_rel=0.0) for i in range(1, 16)]
    pairs += [pair("fail", 16, "triton_red_fused_sum_3", max_abs=2.0, max_rel=0.5, inf_a=1, inf_b=0),
              pair("volatile", 17, "seed_0")]
    first = FirstDivergence(launch=16, launch_b=16, graph="graph0", kernel="triton_red_fused_sum_3",
                            op="triton_red_fused_sum_3", kernel_call=0, kind="born", outputs=[pairs[-2].arg],
                            inputs=[])
    written = plot_diff(result_of(pairs, first), tmp_path / "hand.svg", title="hand-built")
    assert written == str(tmp_path / "hand.svg")
    texts = svg_texts(written)
    assert "hand-built" in texts and OTHER in texts and "NaN/Inf" in texts and "0" in texts
    assert any("first divergence: triton_red_fused_sum_3 (launch 16, born here)" in t for t in texts)
    assert any("not compared by value, not drawn: 1 volatile" in t for t in texts)

    plot_diff(result_of([]), tmp_path / "empty.png")  # nothing compared: still a picture, saying so
    assert (tmp_path / "empty.png").read_bytes().startswith(PNG_SIGNATURE)


def test_format_comes_from_the_suffix(tmp_path):
    assert plot_format("x/error.PNG") == "png" and plot_format(tmp_path / "e.svg") == "svg"
    for bad in ("error.pdf", "error"):
        with pytest.raises(PlotError, match=r"a plot is written as \.png or \.svg"):
            plot_format(bad)


# -- through the CLI, on real dumps ---------------------------------------------------------------
def test_png_beside_the_unchanged_report(dumps, tmp_path):
    out = tmp_path / "error.png"
    plain = diff(dumps.save_a, dumps.save_p)
    r = diff(dumps.save_a, dumps.save_p, "--plot", out)
    assert r.exit_code == plain.exit_code == 1
    assert r.stdout == plain.stdout  # passing records kept for the plot are not listed
    assert "passing record(s) not listed" in r.stdout
    assert r.stderr.strip() == f"plot written to {out}"
    assert out.read_bytes().startswith(PNG_SIGNATURE)


def test_svg_names_the_first_divergence(dumps, tmp_path):
    out = tmp_path / "error.svg"
    first = aoti_debug.diff(dumps.save_a, dumps.save_p).first_divergence
    r = diff(dumps.save_a, dumps.save_p, "--plot", out)
    assert r.exit_code == 1
    texts = svg_texts(out)
    assert any(first.kernel in t and t.startswith("first divergence: ") for t in texts), texts
    assert "max abs error" in texts and "launch (run A)" in texts


def test_equal_runs_and_other_formats_keep_their_output(dumps, tmp_path):
    r = diff(dumps.save_a, dumps.save_b, "--plot", tmp_path / "equal.svg")
    assert r.exit_code == 0 and svg_texts(tmp_path / "equal.svg")

    def report(*args):
        data = json.loads(diff(dumps.save_a, dumps.save_p, "--format", "json", "--limit", "2", *args).stdout)
        data.pop("seconds")
        return data

    assert report("--plot", tmp_path / "limited.png") == report()  # --limit still caps the listed records
    stats = diff(dumps.stats_a, dumps.stats_p, "--plot", tmp_path / "stats.svg")
    assert stats.exit_code == 1
    assert any("stats-level dump: errors are over the recorded stats" in t for t in svg_texts(tmp_path / "stats.svg"))


def test_unknown_suffix_is_one_line_exit_2(dumps, tmp_path):
    r = diff(dumps.save_a, dumps.save_p, "--plot", tmp_path / "error.pdf")
    assert r.exit_code == 2
    assert error_line(r) == f"Error: {tmp_path / 'error.pdf'}: a plot is written as .png or .svg, not .pdf"
    assert r.stdout == "" and not (tmp_path / "error.pdf").exists()  # refused before comparing


def test_unwritable_plot_is_one_line_exit_2(dumps, tmp_path):
    r = diff(dumps.save_a, dumps.save_p, "--plot", tmp_path / "no" / "such" / "dir.png")
    assert r.exit_code == 2 and error_line(r).startswith(f"Error: cannot write {tmp_path / 'no'}")


def test_missing_matplotlib_names_the_install(dumps, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    r = diff(dumps.save_a, dumps.save_p, "--plot", tmp_path / "error.png")
    assert r.exit_code == 2
    line = error_line(r)
    assert "needs matplotlib" in line and "pip install matplotlib" in line and "aoti_debug[plot]" in line
    assert diff(dumps.save_a, dumps.save_p).exit_code == 1  # without --plot, matplotlib is not needed
