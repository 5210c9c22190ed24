"""Docs agree with the code: every command has help, README names every command, level
and environment variable, and the emitted-code shape stays as documented."""

from __future__ import annotations

import os
import re

import pytest
from click.testing import CliRunner

from aoti_debug import config
from aoti_debug.cli import main
from aoti_debug.codegen import native_library, python_emitter
from aoti_debug.codegen.launch import Launch, LaunchArg
from aoti_debug.codegen.manager import Manager
from aoti_debug.format.protocol import Site, SiteArg
from tests.conftest import REPO

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it

README = open(os.path.join(REPO, "README.md")).read()


def test_every_command_has_help_and_is_in_readme():
    runner = CliRunner()
    res = runner.invoke(main, ["--help"])
    assert res.exit_code == 0
    for name, cmd in main.commands.items():
        r = runner.invoke(main, [name, "--help"])
        assert r.exit_code == 0, (name, r.output)
        assert cmd.help and len(cmd.help.strip()) > 20, f"{name} lacks a help text"
        for param in cmd.params:
            if param.param_type_name == "option" and param.name != "help":
                assert param.help, f"{name} {param.opts} lacks help"
        assert f"aoti-debug {name}" in README, f"README does not mention `aoti-debug {name}`"


def test_readme_names_every_level_and_env_var():
    for num, name in config.LEVELS.items():
        assert re.search(rf"\|\s*{num}\s*\|\s*`{name}`", README), name
    for var in (config.ENV_LEVEL, config.ENV_KERNELS, config.ENV_DIR, config.ENV_SYNC, config.ENV_PHASES,
                config.ENV_MAX_BYTES, config.ENV_REFERENCE, config.ENV_SAVE_LAUNCHES, config.ENV_RING, config.ENV_TRIGGER, config.ENV_FUSED_STATS,
                config.ENV_STATS_COMPILE,
                config.ENV_REUSE,
                config.ENV_TRACE_BUILD, config.ENV_TRACE_DEVICE, config.ENV_TORCH_LEVEL, config.ENV_TORCH_KERNELS):
        assert var in README, var


def test_python_emitter_golden():
    """The exact code around one launch (golden snippet); odd names are escaped."""
    launch = Launch(
        kernel="triton_poi_fused_add_0", op="triton_poi_fused_add_0", kind="triton",
        args=[LaunchArg("arg0_1", "arg0_1", "input"), LaunchArg("buf0", "buf0", "output"),
              LaunchArg("xnumel", "16", "input", kind="scalar")],
    )
    m = Manager(config.make_compile_settings("save"))

    class Root:
        class imports:
            lines: list = []

            @classmethod
            def writeline(cls, line):
                cls.lines.append(line)

    root = Root()
    native = native_library.stats_library_path()  # the runtime library, for CPU stats at this level
    before = python_emitter.emit(m, root, launch, "before")
    after = python_emitter.emit(m, root, launch, "after")
    site = ("('', 'triton_poi_fused_add_0', 'triton_poi_fused_add_0', "
            "(('arg0_1', 'input', 'tensor', 'arg0_1', False, (), ()), ('xnumel', 'input', 'scalar', '16', False, (), ())), "
            "(('buf0', 'output', 'tensor', 'buf0', False, (), ()),), None, 0, '')")
    # The site is a module constant, built once at import; the hook lines name the kernel.
    assert before == ["_aoti_debug.launch(_AD_SITE_0, (arg0_1, 16))  # 'triton_poi_fused_add_0'"]
    assert after == ["_aoti_debug.done(_AD_SITE_0, (buf0,))  # 'triton_poi_fused_add_0'"]
    assert Root.imports.lines == [
        "from aoti_debug.runtime.hooks import graph as _aoti_debug_graph",
        f"_aoti_debug = _aoti_debug_graph(globals().get('__file__'), 'save', False, info=(), native={native!r}, "
        "protocol=7)",
        f"_AD_SITE_0 = _aoti_debug.site({site})",
    ]
    odd = Launch(kernel="k'\"\\n\n", op="k", kind="cpp", args=[])
    line = python_emitter.emit(m, root, odd, "before")[0]
    assert line == "_aoti_debug.launch(_AD_SITE_1, ())  # 'k\\'\"\\\\n\\n'"
    compile("\n".join([*Root.imports.lines, line]), "<wrapper>", "exec")  # the comment ends the line
    module: dict = {}
    exec("\n".join(Root.imports.lines), module)  # the header builds typed sites at import
    assert module["_AD_SITE_0"] == Site("", "triton_poi_fused_add_0", "triton_poi_fused_add_0",
                                        (SiteArg("arg0_1", "input", "tensor", "arg0_1"),
                                         SiteArg("xnumel", "input", "scalar", "16")),
                                        (SiteArg("buf0", "output", "tensor", "buf0"),), None, 0)
    assert module["_AD_SITE_1"].kernel == "k'\"\\n\n"


def _readme_command_lines() -> list[list[str]]:
    """Every ``aoti-debug ...`` invocation in the README's code blocks, split as a shell would."""
    import shlex

    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("aoti-debug "):
                lines.append(shlex.split(line)[1:])
    return lines


def test_every_readme_command_parses():
    """Each command line the README shows names a real command and options it accepts
    (parsed by click, not run: the paths in it are examples)."""
    lines = _readme_command_lines()
    assert {args[0] for args in lines} >= {"run", "diff", "show", "locate"}, lines
    for args in lines:
        cmd = main.commands.get(args[0])
        assert cmd is not None, f"README shows an unknown command: {args}"
        ctx = cmd.make_context(args[0], list(args[1:]), resilient_parsing=True)
        own = args[1:args.index("--")] if "--" in args else args[1:]  # what follows -- is CMD's
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        unknown = [a for a in own if a.startswith("-") and a.split("=")[0] not in known]
        assert not unknown and ctx is not None, (args, unknown)
