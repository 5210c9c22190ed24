"""Codegen links an input to the launch that wrote it (``SiteArg.reuse``) only when the
wrapper's code says it holds what that launch wrote: no launch, and no line outside one,
touched that storage in between (``codegen/manager.py``). The real models' links are
checked against their values in ``test_real_models.py``."""

from __future__ import annotations

from aoti_debug import config
from aoti_debug.codegen.launch import Launch, LaunchArg
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
                  args=[LaunchArg(r.split("(")[-1].split(",")[0] if "(" in r else r, r, "input") for r in reads] +
                       [LaunchArg(w, w, "output") for w in writes])


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
