"""Codegen links an input to the launch that wrote it (``SiteArg.reuse``) only when the
wrapper's code says it holds what that launch wrote: no launch, and no line outside one,
touched that storage in between (``codegen/manager.py``). The real models' links are
checked against their values in ``test_real_models.py``."""

from __future__ import annotations

import os

import pytest

from aoti_debug import config
from aoti_debug.codegen.launch import Launch, LaunchArg, base_name
from aoti_debug.codegen.manager import Manager


class _Code:
    """The wrapper's code buffer as ``_InstrumentLine.codegen`` sees it."""

    def __init__(self):
        self._lines: list[str] = []

    def writeline(self, line: str) -> None:
        self._lines.append(line)


class _Root:
    def __init__(self):
        self.imports = _Code()


def _launch(kernel: str, reads: list[str], writes: list[str]) -> Launch:
    return Launch(kernel=kernel, op=kernel, kind="triton",
                  args=[LaunchArg(base_name(r), r, "input") for r in reads] + [LaunchArg(w, w, "output") for w in writes])


def _links(between: list[str], level: str = "stats", reuse: bool = True, cpp: bool = False,
           kernels: str | None = None) -> tuple:
    """The links of the second launch's inputs: launch 1 writes buf0, ``between`` is
    written out, launch 2 reads buf0 and arg1_1."""
    m = Manager(config.make_compile_settings(level, kernels=kernels, reuse=reuse))
    code, root = _Code(), _Root()
    root._aoti_debug_header = root._aoti_debug_cpp_header = True  # (no header: nothing is imported)
    first = m.prepare(_launch("triton_poi_fused_0", ["arg0_1"], ["buf0"]))
    m.lines_written(code, "before")
    m.emit(root, first, "before", cpp)
    code.writeline("triton_poi_fused_0.run(arg0_1, buf0)")
    m.emit(root, first, "after", cpp)
    m.lines_written(code, "after")
    for line in between:
        code.writeline(line)
    m.lines_written(code, "before")
    second = m.prepare(_launch("triton_poi_fused_1", ["buf0", "arg1_1"], ["buf1"]))
    return tuple(a.reuse for a in second.args if a.before)


def test_an_output_read_next_is_linked():
    assert _links([]) == ((0, 0), ())
    assert _links([], cpp=True) == ((0, 0), ())  # the C++ runtime takes them too (records.h)
    assert _links(["del arg0_1", "buf1 = empty_strided_cuda((16,), (1,), torch.float32)",
                   "# Topologically Sorted Source Nodes: [buf0]"]) == ((0, 0), ())
    assert _links(["arg0_1.reset();", "// Topologically Sorted Source Nodes: [buf0]",
                   "auto buf9 = std::move(buf7);  // reuse"], cpp=True) == ((0, 0), ())


def test_a_line_outside_a_launch_naming_the_storage_breaks_the_link():
    for line in ("buf0.copy_(arg2_1)", "torch.ops._c10d_functional.all_reduce_(buf0, 'sum', '0')",
                 "buf0.zero_()", "buf2 = buf0"):
        assert _links([line]) == ((), ()), line
    for line in ("AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_copy_(buf0, arg2_1, 0));",
                 "auto buf2 = std::move(buf0);", "buf0.reset(); buf0 = buf3;"):
        assert _links([line], cpp=True) == ((), ()), line


def test_no_link_where_reuse_is_off_or_the_level_reads_no_ring():
    assert _links([], reuse=False) == ((), ())
    for level in ("save", "names"):
        assert _links([], level=level) == ((), ()), level


def test_an_uninstrumented_producer_is_no_link():
    assert _links([], kernels="triton_poi_fused_1") == ((), ())


_CL = ((2, 16, 4, 4), (256, 1, 64, 16), 0)  # a channels_last activation's sizes, strides, offset


def _strided_links(reader_layout: tuple, between: list[str] = (), cpp: bool = False) -> tuple:
    """Launch 1 writes buf0 laid out channels_last (``_CL``); the wrapper then reuses
    buf0's memory as buf1 (``auto buf1 = std::move(buf0);  // reuse``, as it does for a
    batch norm computed in place on a convolution's output), writes ``between``, and
    launch 2 reads and writes buf1 in place, laid out as ``reader_layout``: its link."""
    m = Manager(config.make_compile_settings("stats"))
    code, root = _Code(), _Root()
    root._aoti_debug_header = root._aoti_debug_cpp_header = True  # (no header: nothing is imported)
    first = m.prepare(Launch(kernel="aoti_torch_cuda_convolution", op="aten.convolution", kind="extern",
                             args=[LaunchArg("arg0_1", "arg0_1", "input"),
                                   LaunchArg("buf0", "buf0", "output", layout=("buf0", *_CL))]))
    m.lines_written(code, "before")
    m.emit(root, first, "before", cpp)
    code.writeline("aoti_torch_cuda_convolution(arg0_1, ..., &buf0_handle);")
    m.emit(root, first, "after", cpp)
    m.lines_written(code, "after")
    m.alias("buf1", "buf0", reuse=True)
    for line in ("auto buf1 = std::move(buf0);  // reuse", *between):
        code.writeline(line)
    m.lines_written(code, "before")
    second = m.prepare(Launch(kernel="triton_poi_fused_relu_1", op="triton_poi_fused_relu_1", kind="triton",
                              args=[LaunchArg("buf1", "buf1", "inout", layout=("buf1", *reader_layout))]))
    return second.args[0].reuse


def test_a_strided_output_reused_in_place_is_linked():
    """A non-contiguous output (channels_last) read again in place through a buffer reuse
    is the same elements in the same order only where the reader's sizes, strides and
    offset are the writer's: then linked, else read."""
    for cpp in (False, True):
        assert _strided_links(_CL, cpp=cpp) == (0, 0), cpp
    assert _strided_links(((2, 16, 4, 4), (256, 16, 4, 1), 0)) == ()  # other strides: other order
    assert _strided_links(((2, 16, 4, 4), (256, 1, 64, 16), 16)) == ()  # another offset
    assert _strided_links(((2, 16, 4, 2), (256, 1, 64, 16), 0)) == ()  # fewer elements
    assert _strided_links(_CL, ["AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_copy_(buf1, arg2_1, 0));"], cpp=True) == ()


def _conv_bn_model():
    """Convolutions on channels_last activations, each followed by a batch norm and ReLU
    that Inductor computes in place on the convolution's output (a buffer reuse)."""
    import torch

    torch.manual_seed(0)
    layers = []
    for c_in, c_out in ((3, 8), (8, 8), (8, 8)):
        bn = torch.nn.BatchNorm2d(c_out)
        with torch.no_grad():
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
        layers += [torch.nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), bn, torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).eval().to(memory_format=torch.channels_last)
    return model, [torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last) for _ in range(2)]


@pytest.mark.parametrize("wrapper", ["python", "cpp"])
def test_a_channels_last_convolution_output_is_linked_to_the_batch_norm_that_reads_it(tmp_path, wrapper):
    """End to end on the CPU: each batch norm computed in place on a channels_last
    convolution's output links its input to the convolution's output record (the Python
    wrapper's site literal; the C++ runtime's ``reused``) instead of reading it again, and
    that record equals, stats and checksum, the value read where it is used: the Python
    runtime reads CPU inputs anyway, and a ``reuse=False`` compile reads every one."""
    import json

    import torch

    import aoti_debug
    from tests.conftest import only_run, records, wrapper_sites

    model, xs = _conv_bn_model()
    dumps = {}
    for reuse in (True, False):
        torch._dynamo.reset()
        dumps[reuse] = str(tmp_path / f"reuse{int(reuse)}")
        with torch.no_grad(), torch._inductor.config.patch(cpp_wrapper=wrapper == "cpp", force_disable_caches=True), \
                aoti_debug.enabled(level="stats", dump_dir=dumps[reuse], reuse=reuse):
            fn = torch.compile(model)
            outs = [fn(x) for x in xs]
        aoti_debug.flush()
        _equal_to_eager(model, xs, outs)
    recs = [r for r in records(only_run(dumps[True])) if r["kind"] == "tensor"]
    strided = [r for r in recs if r["phase"] == "before" and r["arg"].startswith("buf") and
               r["stride"][1] == 1 and r["shape"][1] > 1 and not r.get("uninitialised")]
    if wrapper == "python":
        with open(os.path.join(only_run(dumps[True]), "run.json")) as f:
            code = open(json.load(f)["graphs"]["graph0"]["file"]).read()
        sites = wrapper_sites(code)
        linked = [r for r in strided if sites[r["site"]].before[r["index"]].reuse]
        for r in linked:  # (the Python runtime read it: its record is the value where it is used)
            producer, at = sites[r["site"]].before[r["index"]].reuse
            made = [q for q in recs if q["phase"] == "after" and q["site"] == producer and
                    q["index"] == len(sites[producer].before) + at and q["launch"] < r["launch"]][-1]
            assert (made["checksum"], made["stats"]) == (r["checksum"], r["stats"]), (made, r)
    else:
        linked = [r for r in strided if r.get("reused") is not None]
    batch_norms = [r for r in strided if "batch_norm" in r["kernel"]]
    assert len(batch_norms) == 2 * 3 and {id(r) for r in batch_norms} <= {id(r) for r in linked}, \
        [(r["kernel"], r["arg"], r["stride"]) for r in strided if r not in linked]
    result = aoti_debug.diff(dumps[True], dumps[False])
    assert result and result.exit_code == 0, result


def _input_links(monkeypatch, between: list[str], device: str = "cuda", cpp: bool = False) -> tuple:
    """Launch 1 reads arg0_1 and a transposed view of arg2_1, ``between`` is written out,
    launch 2 reads arg0_1, arg1_1 and the view again: their links, and the inputs site's
    values (``Manager.inputs``), with every graph input on ``device``."""
    from aoti_debug.codegen import describe

    monkeypatch.setattr(describe, "static_input_device", lambda name: device)
    m = Manager(config.make_compile_settings("stats"))
    code, root = _Code(), _Root()
    root._aoti_debug_header = root._aoti_debug_cpp_header = True  # (no header: nothing is imported)
    view = "reinterpret_tensor(arg2_1, (16, 32), (1, 16), 0)"
    links = []
    for n, reads in enumerate((["arg0_1", view], ["arg0_1", "arg1_1", view])):
        m.lines_written(code, "before")
        launch = _launch(f"triton_poi_fused_{n}", reads, [f"buf{n}"])
        m.open_inputs(root, code, cpp)
        launch = m.prepare(launch)
        for phase, line in (("before", f"triton_poi_fused_{n}.run(...)"), ("after", None)):
            for text in m.emit(root, launch, phase, cpp):
                code.writeline(text)
            if line:
                code.writeline(line)
        m.lines_written(code, "after")
        links.append(tuple(a.reuse for a in launch.args if a.before))
        for line in between if n == 0 else ():
            code.writeline(line)
    values = () if m.inputs is None else tuple(a.expr for a in m.inputs.args)
    return tuple(links), values, code, root


def test_graph_inputs_are_read_once_a_call_before_the_first_launch(monkeypatch):
    """The inputs site (number 0, reserved at the first launch) reads each graph input
    once, in the form a launch reads it; every launch takes it from there. Its lines are
    written when the wrapper is: the header's site constant, the call before launch 1."""
    links, values, code, root = _input_links(monkeypatch, ["assert_size_stride(arg1_1, (16,), (1,))"])
    view = "reinterpret_tensor(arg2_1, (16, 32), (1, 16), 0)"
    assert links == (((0, 0), (0, 1)), ((0, 0), (0, 2), (0, 1)))
    assert values == ("arg0_1", view, "arg1_1")
    first = code._lines[0]
    assert not isinstance(first, str) and first() == \
        f"_aoti_debug.launch(_AD_SITE_0, ()); _aoti_debug.done(_AD_SITE_0, (arg0_1, {view}, arg1_1))  # 'graph_inputs'"
    assert first.with_prefix("    ")().startswith("    _aoti_debug.launch(_AD_SITE_0, ())")
    constant = root.imports._lines[0]
    assert constant().startswith("_AD_SITE_0 = _aoti_debug.site(('', 'graph_inputs', 'graph_inputs', (), (('arg0_1', ")
    assert code._lines[1].startswith("_aoti_debug.launch(_AD_SITE_1, ")


def test_a_graph_input_touched_in_the_call_is_read_where_used(monkeypatch):
    for line in ("arg1_1.copy_(buf0)", "buf7 = arg1_1", "torch.ops._c10d_functional.all_reduce_(arg1_1, 'sum', '0')"):
        links, values, _code, _root = _input_links(monkeypatch, [line])
        assert links[1] == ((0, 0), (), (0, 1)), line  # (arg0_1 and the view of arg2_1 untouched)
        assert values == ("arg0_1", "reinterpret_tensor(arg2_1, (16, 32), (1, 16), 0)"), line


def test_graph_inputs_are_read_once_only_where_their_records_come_from_the_ring(monkeypatch):
    """CPU inputs (the runtimes read them on the host: nothing would be saved) and inputs
    that are no constant and no static graph input (None: a model input, new at every
    call) are read where they are used; the first launch then writes no line for them."""
    for device, cpp in (("cpu", False), (None, False), ("cpu", True), (None, True)):
        links, values, code, _root = _input_links(monkeypatch, [], device=device, cpp=cpp)
        assert links == (((), ()), ((), (), ())) and values == (), (device, cpp)
        assert all(isinstance(line, str) or not line() for line in code._lines), (device, cpp)


def test_only_expressions_the_first_launch_can_evaluate_are_read_there():
    from aoti_debug.codegen.manager import _of_input

    assert _of_input("arg2_1", "arg2_1")
    assert _of_input("reinterpret_tensor(arg2_1,(16,32),(1,16),0)", "arg2_1")
    for expr in ("reinterpret_tensor(arg2_1,(s0,32),(1,s0),0)", "reinterpret_tensor(arg2_1,(16,),(1,16),0)",
                 "arg2_1[0]", "reinterpret_tensor(buf2,(16,32),(1,16),0)", "as_strided(arg2_1,(16,),(1,))"):
        assert not _of_input(expr, "arg2_1"), expr


def _small_model(monkeypatch):
    """A small MLP and two inputs for an end-to-end compile on the CPU, with CPU inputs let
    into the ``graph_inputs`` launch and Inductor's caches off (the codegen runs)."""
    import torch

    from aoti_debug.codegen import manager

    monkeypatch.setattr(manager, "INPUTS_DEVICES", ("cuda", "cpu"))
    monkeypatch.setenv("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8)).eval()
    torch._dynamo.reset()
    return model, [torch.randn(4, 16) for _ in range(2)]


def _equal_to_eager(model, xs, outs) -> None:
    import torch

    torch._dynamo.reset()
    with torch.no_grad():
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, model(x))


def test_a_compiled_model_reads_its_weights_once_a_call_and_its_input_where_used(tmp_path, monkeypatch):
    """End to end, the Python wrapper on the CPU with CPU inputs let in (the runtime reads
    CPU inputs where they are used as well, so both records of each value are there):
    the ``graph_inputs`` launch comes first in every call, reads each weight and bias in
    the form a launch reads it (a transposed view), not the model input (new every call);
    each launch's record of such an input links to it and equals it; the outputs are
    eager's."""
    import torch

    import aoti_debug
    from aoti_debug.codegen import manager
    from tests.conftest import only_run, records

    model, xs = _small_model(monkeypatch)
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=str(tmp_path / "a")):
        fn = torch.compile(model)
        outs = [fn(x) for x in xs]
    aoti_debug.flush()
    _equal_to_eager(model, xs, outs)
    recs = [r for r in records(only_run(str(tmp_path / "a"))) if r["kind"] == "tensor"]
    inputs = [r for r in recs if r["kernel"] == manager.INPUTS_KERNEL]
    assert len(inputs) == 2 * 6 and {r["phase"] for r in inputs} == {"after"}, inputs
    assert [r["shape"] for r in inputs[:6]] == [[32], [16, 32], [32], [32], [8], [32, 8]], inputs[:6]
    def key(r):
        return r["arg"].split("#")[0], tuple(r["shape"]), tuple(r["stride"])

    read = {key(r) for r in inputs}
    users = [r for r in recs if r["phase"] == "before" and r["kernel"] != manager.INPUTS_KERNEL and key(r) in read]
    assert len(users) == 2 * 6, [(r["kernel"], r["arg"]) for r in recs if r["phase"] == "before"]
    for r in users:
        q = [q for q in inputs if q["launch"] < r["launch"] and key(q) == key(r)][-1]  # this call's
        assert (q["checksum"], q["stats"]) == (r["checksum"], r["stats"]), (q, r)
    assert all(r["shape"] != [4, 16] for r in inputs)
    # A run without it (``reuse=False``, or level save) pairs with this one launch by launch:
    # diff leaves the inputs launch out (its values are compared where they are used).
    from click.testing import CliRunner

    from aoti_debug.cli import main

    torch._dynamo.reset()
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=str(tmp_path / "b"), reuse=False):
        fn = torch.compile(model)
        for x in xs:
            fn(x)
    aoti_debug.flush()
    torch._dynamo.reset()
    other = only_run(str(tmp_path / "b"))
    assert not any(r["kernel"] == manager.INPUTS_KERNEL for r in records(other))
    for a, b in ((only_run(str(tmp_path / "a")), other), (other, only_run(str(tmp_path / "a")))):
        res = CliRunner().invoke(main, ["diff", a, b])
        assert res.exit_code == 0 and "EQUAL" in res.output and "unpaired" not in res.output, res.output


@pytest.mark.parametrize("wrapper", ["cpp", pytest.param("aoti", marks=pytest.mark.slow)])
def test_the_cpp_runtime_takes_weights_read_once_a_call(tmp_path, monkeypatch, wrapper):
    """``cpp_wrapper`` and AOTInductor (CPU inputs let in: the C++ runtime takes linked CPU
    inputs too): the ``graph_inputs`` launch reads the weights (AOTInductor's constants),
    a transposed view spelled with arrays of its own; every launch's record of them is
    taken from it (``reused``: its site), equal to it; the model input is read where used."""
    import torch

    import aoti_debug
    from aoti_debug.codegen import manager
    from tests.conftest import only_run, records

    model, xs = _small_model(monkeypatch)
    with torch.no_grad(), aoti_debug.enabled(level="stats", dump_dir=str(tmp_path / "dump")):
        if wrapper == "cpp":
            with torch._inductor.config.patch(cpp_wrapper=True):
                fn = torch.compile(model)
                outs = [fn(x) for x in xs]
        else:
            package = torch._inductor.aoti_compile_and_package(torch.export.export(model, (xs[0],)),
                                                               package_path=str(tmp_path / "m.pt2"))
            fn = torch._inductor.aoti_load_package(package)
            outs = [fn(x) for x in xs]
    aoti_debug.flush()
    _equal_to_eager(model, xs, outs)
    recs = [r for r in records(only_run(str(tmp_path / "dump"))) if r["kind"] == "tensor"]
    assert {r["wrapper"] for r in recs} == {"cpp"}
    inputs = [r for r in recs if r["kernel"] == manager.INPUTS_KERNEL]
    assert len(inputs) >= 2 * 5 and all(r["shape"] != [4, 16] for r in inputs), inputs
    assert [16, 32] in [r["shape"] for r in inputs]  # (the first weight, transposed)
    site = inputs[0]["site"]
    taken = [r for r in recs if r.get("reused") == site]
    assert len(taken) == len(inputs), [(r["kernel"], r["arg"], r.get("reused")) for r in recs if r["phase"] == "before"]
    for r in taken:
        q = [q for q in inputs if q["launch"] < r["launch"] and q["arg"] == r["arg"]][-1]  # this call's
        assert [q[k] for k in ("checksum", "stats", "shape", "stride")] == \
            [r[k] for k in ("checksum", "stats", "shape", "stride")]


def test_a_graph_inputs_launch_that_cannot_be_written_leaves_each_launch_reading_its_weights(monkeypatch, caplog):
    from aoti_debug.codegen import manager, python_emitter

    def broken(*args):
        raise RuntimeError("no deferred lines here")

    monkeypatch.setattr(python_emitter, "open_inputs", broken)
    monkeypatch.setattr(manager, "_warned_inputs", False)
    with caplog.at_level("WARNING", logger="aoti_debug"):
        links, values, _code, _root = _input_links(monkeypatch, [])
    assert links == (((), ()), ((), (), ())) and values == ()
    assert "weights are read at every launch that uses them" in caplog.text and "no deferred lines here" in caplog.text
