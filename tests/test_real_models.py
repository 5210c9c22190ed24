"""Verdicts you can trust on real models: transformers' GPT-2, Llama, BERT and ResNet.

Each (model, wrapper, level) is compiled once — the Python wrapper (``torch.compile``),
the C++ wrapper (``cpp_wrapper=True``) and an AOTInductor package (``torch.export`` ->
``aoti_compile_and_package`` under ``aoti_debug.enabled`` -> ``aoti_load_package`` in
this process) — and run three times from that one artifact, each run into its own dump:
``a`` and ``b`` identical, ``p`` with one norm weight of layer 1 multiplied by 1.01.
The Python and C++ wrappers read parameters as graph inputs, so the parameter is
perturbed in place between runs; an AOTInductor package holds its weights as
constants, swapped with ``load_constants`` (no second compile).

The models (``tests/real_models.py``): GPT-2 (LM head), Llama (grouped-query attention,
RoPE, RMSNorm), BERT (a padded batch with its attention mask: without one, HF skips the
mask under Dynamo but builds it under ``torch.export``, and the two wrappers would run
different graphs) and a ResNet (convolutions, BatchNorm), 2 layers, hidden size 64.

What must hold:
- two identical runs diff equal (exit 0), at ``stats`` and at ``save``;
- the perturbed run's first divergence is the launch of the first kernel that reads
  the perturbed weight (kind ``input``, the divergent input is that weight: checked by
  checksum in both runs and against the generated wrapper's source);
- the three wrappers' dumps of one model diff equal against each other;
- the compiled outputs match eager PyTorch, and no wrapper's dump is empty;
- only values read before any launch wrote them are flagged ``uninitialised`` (never
  compared): a flag that swallowed real values would make the verdicts above vacuous.

GPT-2 at ``stats`` is the fast path; the other models and ``save`` are marked slow
(``make test`` runs them in its second pytest call).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
import zipfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import aoti_debug  # noqa: E402
from aoti_debug.cli import main as cli_main  # noqa: E402
from aoti_debug.format import reader  # noqa: E402
from aoti_debug.runtime.stats import tensor_stats  # noqa: E402
from tests.conftest import dump_dir_restored, load_record, only_run, records, wrapper_sites  # noqa: E402
from tests.real_models import BUILDERS, RealModel  # noqa: E402

PERTURB = 1.01
WRAPPERS = ("python", "cpp", "aoti")
FAST_MODELS = ("gpt2",)
SAVE_MODELS = ("bert",)  # one model per wrapper at level save (each compile costs 15-60 s here)


def _combos() -> list:
    """(model, wrapper, level): every model in every wrapper at stats, SAVE_MODELS at save too."""
    out = []
    for level, models in (("stats", tuple(BUILDERS)), ("save", SAVE_MODELS)):
        for model in models:
            for wrapper in WRAPPERS:
                slow = level != "stats" or model not in FAST_MODELS
                marks = (pytest.mark.slow,) if slow else ()
                out.append(pytest.param(model, wrapper, level, marks=marks, id=f"{model}-{wrapper}-{level}"))
    return out


COMBOS = _combos()


def _pairs() -> list:
    """(model, level, other wrapper): the Python wrapper's dump against the C++ and AOTI ones."""
    out = []
    for level, models in (("stats", tuple(BUILDERS)), ("save", SAVE_MODELS)):
        for model in models:
            for other in ("cpp", "aoti"):
                slow = level != "stats" or model not in FAST_MODELS
                out.append(pytest.param(model, level, other, marks=(pytest.mark.slow,) if slow else (),
                                        id=f"{model}-python-vs-{other}-{level}"))
    return out


# --------------------------------------------------------------------------- building the dumps
@dataclasses.dataclass
class Reference:
    model: RealModel
    out: torch.Tensor
    """Eager output."""
    out_perturbed: torch.Tensor
    """Eager output with the norm weight multiplied by PERTURB."""
    weight: torch.Tensor
    weight_perturbed: torch.Tensor


@dataclasses.dataclass
class Dumps:
    model: str
    wrapper: str
    level: str
    a: str
    b: str
    p: str
    """Run directories: two identical runs and the perturbed one."""
    out_a: torch.Tensor
    out_b: torch.Tensor
    out_p: torch.Tensor
    code: str
    """The generated wrapper's source (Python, or C++ for cpp_wrapper and AOTI)."""
    compile_s: float


def _checksum(t: torch.Tensor) -> str:
    return tensor_stats(t.detach().contiguous())[1]


@contextlib.contextmanager
def perturbed(model: RealModel):
    """Multiply the norm weight by PERTURB in place; restores the exact original."""
    saved = model.norm_weight.detach().clone()
    with torch.no_grad():
        model.norm_weight.mul_(PERTURB)
    try:
        yield
    finally:
        with torch.no_grad():
            model.norm_weight.copy_(saved)


class Builder:
    """Builds each model once and each (model, wrapper, level) dump set on first use."""

    def __init__(self, root):
        self.root = root
        self.refs: dict[str, Reference] = {}
        self.built: dict[tuple[str, str, str], Dumps] = {}
        self.timings: list[str] = []

    def ref(self, name: str) -> Reference:
        if name not in self.refs:
            model = BUILDERS[name]()
            weight = model.norm_weight.detach().clone()
            out = model.eager()
            with perturbed(model):
                out_p = model.eager()
                weight_p = model.norm_weight.detach().clone()
            assert torch.equal(model.norm_weight, weight) and not torch.equal(weight, weight_p)
            self.refs[name] = Reference(model, out, out_p, weight, weight_p)
        return self.refs[name]

    def get(self, name: str, wrapper: str, level: str) -> Dumps:
        key = (name, wrapper, level)
        if key not in self.built:
            ref = self.ref(name)
            base = os.path.join(str(self.root), f"{name}-{wrapper}-{level}")
            dirs = {run: os.path.join(base, run) for run in ("a", "b", "p")}
            t0 = time.perf_counter()
            build = self._aoti if wrapper == "aoti" else self._compiled
            outs, code, compile_s = build(ref, wrapper, level, dirs, base)
            self.timings.append(f"{name}-{wrapper}-{level}: compile {compile_s:.1f}s, "
                                f"total {time.perf_counter() - t0:.1f}s")
            self.built[key] = Dumps(name, wrapper, level, *(only_run(dirs[r]) for r in ("a", "b", "p")),
                                    *outs, code, compile_s)
        return self.built[key]

    def _compiled(self, ref: Reference, wrapper: str, level: str, dirs: dict, base: str):
        """torch.compile (Python or C++ wrapper): one compile, three runs."""
        model = ref.model
        torch._dynamo.reset()
        outs = []
        with dump_dir_restored(), torch.no_grad(), torch._inductor.config.patch(cpp_wrapper=wrapper == "cpp"), \
                aoti_debug.enabled(level=level):
            fn = torch.compile(model.module, fullgraph=True)  # one graph: graph0's code is all of it
            for run in ("a", "b", "p"):
                # The same level again: no Dynamo reset, the compiled graph stays; the new dump
                # dir starts a new run (the C++ runtime follows AOTI_DEBUG_DIR, set by enable).
                aoti_debug.enable(level=level, dump_dir=dirs[run])
                t0 = time.perf_counter()
                with perturbed(model) if run == "p" else contextlib.nullcontext():
                    outs.append(fn(*model.inputs))
                if run == "a":
                    compile_s = time.perf_counter() - t0  # the first call compiles
                aoti_debug.flush()
        with open(os.path.join(only_run(dirs["a"]), "run.json")) as f:
            source = json.load(f)["graphs"]["graph0"]["file"]
        with open(source) as f:
            code = f.read()
        return outs, code, compile_s

    def _aoti(self, ref: Reference, wrapper: str, level: str, dirs: dict, base: str):
        """torch.export + aoti_compile_and_package (instrumented), loaded in this process."""
        model = ref.model
        os.makedirs(base, exist_ok=True)
        t0 = time.perf_counter()
        with torch.no_grad():
            ep = torch.export.export(model.module, model.inputs)
        with aoti_debug.enabled(level=level):
            pkg = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(base, "model.pt2"))
        compile_s = time.perf_counter() - t0
        runner = torch._inductor.aoti_load_package(pkg)
        fqn = model.norm_path + ".weight"
        assert fqn in runner.get_constant_fqns(), runner.get_constant_fqns()
        outs = []
        with dump_dir_restored():
            for run in ("a", "b", "p"):
                if run == "p":
                    # The package's weights are constants: swap the one weight in place.
                    runner.load_constants({fqn: ref.weight_perturbed.clone()}, check_full_update=False)
                os.environ["AOTI_DEBUG_DIR"] = dirs[run]  # read by the .so when a run starts
                outs.append(runner(*model.inputs))
        with zipfile.ZipFile(pkg) as z:
            (source,) = [n for n in z.namelist() if n.endswith(".wrapper.cpp")]
            code = z.read(source).decode()
        return outs, code, compile_s


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    b = Builder(tmp_path_factory.mktemp("real_models"))
    yield b
    if b.timings:
        print("\n[real models] " + "; ".join(b.timings))


@pytest.fixture(autouse=True)
def _dump_dir_restored():
    with dump_dir_restored():
        yield


# --------------------------------------------------------------------------- helpers
def _tensor_records(run_dir: str) -> list[dict]:
    return [r for r in records(run_dir) if r["kind"] == "tensor"]


def _explain(result) -> str:
    """The diff's own report of what did not pass (for assertion messages)."""
    shown = [rc for rc in result.failures() if rc.status not in ("uninitialised", "volatile", "ignored")]
    lines = [str(result)] + [str(rc) for rc in shown[:25]]
    return "\n".join(lines)


#: Lines of generated wrapper code that are not the launch of a kernel (instrumentation,
#: argument unpacking, size asserts, declarations, frees).
_NOT_A_LAUNCH = re.compile(r"aoti_debug|assert_size_stride|= args\b|\bdel\b|\[\[maybe_unused\]\]|constants_info_"
                           r"|^\s*(#|//)|AtenTensorHandle|wrap_with_raii|\binputs\[|auto\s+&?\s*\w+\s*=\s*\w+;")


def first_launch_line(code: str, arg: str) -> str:
    """The first line of the generated wrapper that launches something with ``arg``."""
    token = re.compile(r"(?<![\w])" + re.escape(arg) + r"(?![\w])")
    for line in code.splitlines():
        if token.search(line) and not _NOT_A_LAUNCH.search(line) and "(" in line:
            return line
    raise AssertionError(f"no launch with {arg} in the generated code")


# --------------------------------------------------------------------------- (0) correctness, coverage
@pytest.mark.parametrize("model,wrapper,level", COMBOS)
def test_compiled_output_matches_eager(builder, model, wrapper, level):
    ref = builder.ref(model)
    d = builder.get(model, wrapper, level)
    torch.testing.assert_close(d.out_a, ref.out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(d.out_p, ref.out_perturbed, rtol=1e-4, atol=1e-4)
    assert torch.equal(d.out_a, d.out_b)  # the same artifact, the same input: bitwise
    assert not torch.allclose(d.out_a, d.out_p, rtol=0, atol=1e-6)  # the perturbation reached the output


@pytest.mark.parametrize("model,wrapper,level", COMBOS)
def test_dump_records_every_launch(builder, model, wrapper, level):
    """Never empty, the right writer, checksums everywhere, the model output among what the
    last launch wrote (and, at save, its file holds it)."""
    d = builder.get(model, wrapper, level)
    for run_dir, out in ((d.a, d.out_a), (d.b, d.out_b), (d.p, d.out_p)):
        recs = records(run_dir)
        assert recs, f"{wrapper} recorded nothing in {run_dir}"
        assert {r["wrapper"] for r in recs} == {"python" if wrapper == "python" else "cpp"}
        with open(os.path.join(run_dir, "run.json")) as f:
            assert json.load(f)["level"] == level
        tensors = [r for r in recs if r["kind"] == "tensor"]
        launches = {r["launch"] for r in recs}
        # every launch records its outputs after it ran
        assert launches == {r["launch"] for r in tensors if r["phase"] == "after"}, "a launch without outputs"
        assert len(launches) >= 8, sorted({r["kernel"] for r in recs})
        measured = [r for r in tensors if not r.get("uninitialised")]
        assert measured and all(r.get("checksum") and r.get("stats") for r in measured)
        if level == "stats":
            assert all("file" not in r for r in recs)
        else:
            assert all("file" in r for r in measured)
        # The model's output is among the values the graph's last launch wrote.
        last_launch = max(launches)
        written = [r for r in measured if r["launch"] == last_launch and r["phase"] == "after"]
        final = [r for r in written if r["numel"] == out.numel() and r["checksum"] == _checksum(out)]
        assert final, (_checksum(out), written)
        if level == "save":
            torch.testing.assert_close(load_record(run_dir, final[0]).reshape(out.shape), out, rtol=0, atol=0)


@pytest.mark.parametrize("model,wrapper,level", COMBOS)
def test_uninitialised_flags_only_unwritten_buffers(builder, model, wrapper, level):
    """Values never compared must be few and never a graph input or weight: a flag that
    swallowed real values would make every identical-run verdict below vacuous."""
    d = builder.get(model, wrapper, level)
    recs = records(d.a)
    flagged = [r for r in recs if r.get("uninitialised")]
    # "a value read before a launch" (README): what a launch wrote is data, even into a fresh buffer
    assert all(r["phase"] == "before" for r in flagged), [(r["launch"], r["kernel"], r["phase"], r["arg"])
                                                         for r in flagged]
    assert all(re.fullmatch(r"buf\d+", r["arg"]) for r in flagged), [r["arg"] for r in flagged]
    assert not any(r.get("volatile") for r in recs)  # eval mode, no dropout: nothing random
    assert len(flagged) <= len(recs) // 10


# --------------------------------------------------------------------------- (a) identical runs
@pytest.mark.parametrize("model", [pytest.param(m, marks=() if m in FAST_MODELS else (pytest.mark.slow,))
                                   for m in BUILDERS])
def test_inputs_linked_to_their_producer_hold_what_it_wrote(builder, model):
    """Each input the Python wrapper's codegen links to the launch that wrote it
    (``SiteArg.reuse``: on CUDA its record takes that launch's row instead of reading the
    tensor) holds, read on CPU, exactly what that launch's after record holds."""
    d = builder.get(model, "python", "stats")
    sites = wrapper_sites(d.code)
    links = {(s.id, i): a.reuse for s in sites.values() for i, a in enumerate(s.before) if a.reuse}
    # Of the inputs a launch of this graph wrote (not weights): GPT-2 links 23 of 32; the
    # others are slices (attention's q, k, v of one buffer) or a fallback's tuple element.
    inputs = sum(1 for s in sites.values() for a in s.before if a.arg.startswith("buf") and not a.uninitialised)
    assert len(links) >= inputs // 3, f"only {len(links)} of {inputs} intermediate inputs linked to a producer"
    print(f"\n[{model}] {len(links)} of {inputs} intermediate inputs linked to their producer")
    recs = [r for r in records(d.a) if r["kind"] == "tensor"]
    last: dict[tuple[str, int, int], dict] = {}  # (graph, site, index) -> its latest after record
    checked = 0
    for r in recs:
        if r["phase"] == "after":
            last[(r["graph"], r["site"], r["index"])] = r
            continue
        link = links.get((r["site"], r["index"]))
        if link is None:
            continue
        producer, at = link
        made = last.get((r["graph"], producer, len(sites[producer].before) + at))
        assert made is not None and made["launch"] < r["launch"], (r, link)
        assert (made["numel"], made["dtype"]) == (r["numel"], r["dtype"]), (made, r)  # (a view may reshape it)
        assert (made["checksum"], made["stats"]) == (r["checksum"], r["stats"]), (made, r)
        checked += 1
    assert checked >= len(links), (checked, len(links))


@pytest.mark.parametrize("model,wrapper", [
    pytest.param(m, w, marks=() if m in FAST_MODELS else (pytest.mark.slow,), id=f"{m}-{w}")
    for m in BUILDERS for w in ("cpp", "aoti")])
def test_cpp_inputs_taken_from_their_producers_equal_the_values_read(builder, model, wrapper):
    """The C++ runtime gives an input that codegen linked to its producer the stats that
    launch's after record got in this call (``Record.reused``; records.h) instead of reading
    it. Each such record equals, exactly, the Python wrapper's record of the same value,
    which its runtime read on CPU."""
    py = builder.get(model, "python", "stats")
    d = builder.get(model, wrapper, "stats")
    tensors = [r for r in records(d.a) if r["kind"] == "tensor"]
    taken = [r for r in tensors if r.get("reused") is not None]
    inputs = sum(1 for r in tensors if r["phase"] == "before" and r["arg"].startswith("buf") and not r.get("uninitialised"))
    print(f"\n[{model} {wrapper}] {len(taken)} of {inputs} intermediate input records taken from their producer")
    assert len(taken) >= inputs // 4, f"only {len(taken)} of {inputs} intermediate inputs taken from a producer"
    result = aoti_debug.diff(py.a, d.a)
    paired = {(rc.b.launch, rc.b.arg, rc.b.phase): rc for rc in result.records if rc.b is not None}
    for r in taken:
        rc = paired.get((r["launch"], r["arg"], r["phase"]))
        assert rc is not None and rc.a is not None, f"taken record not paired with the Python wrapper's: {r}"
        assert rc.b.reused == r["reused"] and (rc.a.checksum, rc.a.stats) == (rc.b.checksum, rc.b.stats), (str(rc), r)


@pytest.mark.parametrize("model,wrapper,level", COMBOS)
def test_identical_runs_diff_equal(builder, model, wrapper, level):
    d = builder.get(model, wrapper, level)
    result = aoti_debug.diff(d.a, d.b)
    assert result, _explain(result)
    assert result.exit_code == 0 and result.first_divergence is None
    compared = len(_tensor_records(d.a)) - result.counts.get("uninitialised", 0)
    assert result.counts.get("pass", 0) >= compared > 0, result.counts


# --------------------------------------------------------------------------- (b) perturbed weight
@pytest.mark.parametrize("model,wrapper,level", COMBOS)
def test_perturbed_norm_weight_is_the_first_divergence(builder, model, wrapper, level):
    ref = builder.ref(model)
    d = builder.get(model, wrapper, level)
    w_ck, wp_ck = _checksum(ref.weight), _checksum(ref.weight_perturbed)
    recs_a, recs_p = records(d.a), records(d.p)
    shape = list(ref.weight.shape)
    readers_a = [r for r in recs_a if r["phase"] == "before" and r.get("checksum") == w_ck and r["shape"] == shape]
    readers_p = [r for r in recs_p if r["phase"] == "before" and r.get("checksum") == wp_ck and r["shape"] == shape]
    assert readers_a, f"no launch of run a read {ref.model.norm_path}.weight"
    assert [(r["launch"], r["arg"]) for r in readers_a] == [(r["launch"], r["arg"]) for r in readers_p]
    first = readers_a[0]
    assert first["role"] == "input" and not first["arg"].startswith("buf"), first  # a graph input / constant
    if wrapper == "aoti":  # the constant is named after the module it belongs to
        assert first["arg"] == ref.model.norm_path.replace(".", "_") + "_weight", first

    # The generated wrapper's first launch that takes this argument is that kernel.
    line = first_launch_line(d.code, first["arg"])
    assert re.search(r"(?<![\w])" + re.escape(first["kernel"].split(".")[-1]) + r"\s*\(", line), (first, line)

    result = aoti_debug.diff(d.a, d.p)
    assert not result and result.exit_code == 1, _explain(result)
    fd = result.first_divergence
    assert fd is not None, _explain(result)
    assert (fd.kind, fd.launch, fd.kernel, fd.kernel_call) == ("input", first["launch"], first["kernel"],
                                                                first["kernel_call"]), (str(fd), first)
    assert fd.inputs == [first["arg"]], str(fd)
    assert ref.model.norm_op in fd.kernel, str(fd)  # a norm kernel, as the source says
    assert fd.outputs, str(fd)  # what it wrote differs too
    # Nothing before it differs.
    earlier = [rc for rc in result.records if rc.failed and rc.a is not None and rc.a.launch < fd.launch]
    assert not earlier, [str(rc) for rc in earlier]


# --------------------------------------------------------------------------- (c) across wrappers
@pytest.mark.parametrize("model,level,other", _pairs())
def test_wrappers_agree(builder, model, level, other):
    """The Python wrapper's dump against the C++ wrapper's and the AOTI package's: one graph,
    values computed by different wrappers, every record paired and equal."""
    py = builder.get(model, "python", level)
    d = builder.get(model, other, level)
    for a, b in ((py.a, d.a), (py.p, d.p)):
        result = aoti_debug.diff(a, b)
        assert result, _explain(result)
        assert result.counts.get("pass", 0) >= len(_tensor_records(b)) - result.counts.get("uninitialised", 0) > 0


# --------------------------------------------------------------------------- the CLI
def _cli_diff(*args) -> "object":
    result = CliRunner().invoke(cli_main, ["diff", "--no-progress", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_cli_diff_gpt2(builder, wrapper):
    d = builder.get("gpt2", wrapper, "stats")
    same = _cli_diff(d.a, d.b)
    assert same.exit_code == 0, same.output
    assert same.output.rstrip().splitlines()[-1].startswith("EQUAL: ")
    different = _cli_diff(d.a, d.p)
    assert different.exit_code == 1, different.output
    fd = aoti_debug.diff(d.a, d.p).first_divergence
    line = next(x for x in different.output.splitlines() if x.startswith("FIRST DIVERGENCE: "))
    # "graph0" may be followed by the graph's kind and compile id in parentheses.
    head = re.escape(f"FIRST DIVERGENCE: launch {fd.launch} graph0") + r"( \([^)]*\))? " + \
        re.escape(f"{fd.kernel} (call {fd.kernel_call}): input {fd.inputs[0]} ")
    assert re.match(head, line), line


@pytest.mark.slow
@pytest.mark.parametrize("other", ("cpp", "aoti"))
def test_cli_diff_across_wrappers_save(builder, other):
    """Tensor files compared across wrappers: the CLI's verdict, exit 0."""
    py = builder.get(SAVE_MODELS[0], "python", "save")
    d = builder.get(SAVE_MODELS[0], other, "save")
    result = _cli_diff(py.a, d.a)
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().splitlines()[-1].startswith("EQUAL: ")


# --------------------------------------------------------------------------- provenance
@pytest.mark.parametrize("model,wrapper,level", COMBOS)
def test_provenance_names_module_and_source_line(builder, model, wrapper, level):
    """Every record names its launch site, every site has its provenance (written once,
    by whichever runtime ran it), and the perturbed run's first divergence is named by the
    perturbed module's path and the user's source line that calls it."""
    ref = builder.ref(model)
    d = builder.get(model, wrapper, level)
    run = reader.open_run(d.a)
    recs = list(run.records())
    assert recs and all(r.site is not None for r in recs), "a record without its site"
    assert {(r.graph, r.site) for r in recs} <= set(run.sites), "a site without provenance"
    with open(os.path.join(d.a, "sites.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    assert len(lines) == len({(x["graph"], x["site"]) for x in lines}), "a site written twice"
    # Generated kernels' outputs materialise FX nodes of the graph, with their module path.
    outs = [(run.provenance(r), r) for r in recs if r.phase == "after" and r.kernel.startswith(("cpp_", "triton_"))]
    assert outs
    for prov, r in outs:
        origin = prov.output(r.arg)
        assert origin is not None and origin.node in prov.nodes and origin.aten.startswith("aten."), (r.arg, prov)
    assert any(prov.module.startswith(ref.model.norm_path.rsplit(".", 2)[0]) for prov, _ in outs)
    run.close()

    fd = aoti_debug.diff(d.a, d.p).first_divergence
    assert fd is not None
    assert fd.module == ref.model.norm_path, str(fd)
    assert fd.source and re.search(r"\.py:\d+ in \w+", fd.source) and fd.code, str(fd)
    assert f"in {fd.module} at " in str(fd)


# --------------------------------------------------------------------------- fused differently
@pytest.fixture(scope="module")
def gpt2_unfused(builder, tmp_path_factory):
    """GPT-2 compiled with ``realize_opcount_threshold=1`` (Inductor realises more
    buffers: other kernels, other launch order): a clean run and a perturbed one."""
    ref = builder.ref("gpt2")
    model, root = ref.model, tmp_path_factory.mktemp("gpt2_unfused")
    dirs = {run: str(root / run) for run in ("a", "p")}
    torch._dynamo.reset()
    with dump_dir_restored(), torch.no_grad(), torch._inductor.config.patch(realize_opcount_threshold=1), \
            aoti_debug.enabled(level="stats"):
        fn = torch.compile(model.module, fullgraph=True)
        for run in ("a", "p"):
            aoti_debug.enable(level="stats", dump_dir=dirs[run])
            with perturbed(model) if run == "p" else contextlib.nullcontext():
                out = fn(*model.inputs)
            torch.testing.assert_close(out, ref.out_perturbed if run == "p" else ref.out, rtol=1e-4, atol=1e-4)
            aoti_debug.flush()
    return {run: only_run(d) for run, d in dirs.items()}


def test_other_fusion_aligns_by_provenance(builder, gpt2_unfused):
    """A run compiled with other fusion settings: the launch-level pairing is wrong
    (kernels differ, exit 2); values paired by provenance are equal, and a perturbed
    weight is named at its module."""
    ref = builder.ref("gpt2")
    d = builder.get("gpt2", "python", "stats")
    by_launch = aoti_debug.diff(d.a, gpt2_unfused["a"], align="launch")
    assert by_launch.exit_code == 2  # what users got before: unpaired launches, wrong pairs
    same = aoti_debug.diff(d.a, gpt2_unfused["a"])  # auto: the kernels differ -> by value
    assert same, _explain(same)
    assert same.exit_code == 0 and same.counts.get("pass", 0) >= 40, same.counts
    assert any("paired by provenance" in n for n in same.notes)
    assert not any(rc.status == "mismatch" for rc in same.records)  # never values of another meaning
    different = aoti_debug.diff(d.a, gpt2_unfused["p"])
    assert different.exit_code == 1, _explain(different)
    fd = different.first_divergence
    assert fd is not None and fd.module == ref.model.norm_path, str(fd)
    cli = _cli_diff(d.a, gpt2_unfused["p"])
    assert cli.exit_code == 1 and f"in {ref.model.norm_path} at " in cli.output, cli.output


def test_export_against_compile_fused_differently(builder, gpt2_unfused):
    """An AOTInductor package (torch.export: other FX node names) against torch.compile
    with other fusion: values pair by module, source line and node kind, never the n-th
    of one kind with the wrong one (exit 0, no mismatch); a perturbed weight is found."""
    ref = builder.ref("gpt2")
    d = builder.get("gpt2", "aoti", "stats")
    same = aoti_debug.diff(d.a, gpt2_unfused["a"], align="value")
    assert same.exit_code == 0, _explain(same)
    assert any("name their FX nodes differently" in n for n in same.notes)
    assert same.counts.get("pass", 0) >= 20 and not same.counts.get("mismatch"), same.counts
    different = aoti_debug.diff(d.p, gpt2_unfused["a"], align="value")
    assert different.exit_code == 1, _explain(different)
    fd = different.first_divergence
    assert fd is not None and fd.module.startswith(ref.model.norm_path.rsplit(".", 1)[0]), str(fd)


def test_same_kernels_keep_launch_alignment(builder):
    """Two runs of one artifact have the same kernels: auto keeps the launch pairing
    (which also compares every input)."""
    d = builder.get("gpt2", "python", "stats")
    result = aoti_debug.diff(d.a, d.b)
    assert result and not any("paired by provenance" in n for n in result.notes)
    assert result.counts == aoti_debug.diff(d.a, d.b, align="launch").counts
