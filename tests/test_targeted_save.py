"""Targeted save: a stats-level run finds the divergent window, a re-run saves only it.

``AOTI_DEBUG_SAVE_LAUNCHES`` (``aoti-debug run --save-launches``, or ``--from-diff`` with
a diff's JSON report) makes level ``save`` write tensor files for the listed launches
only; every other launch still gets stats and checksums (``skipped`` says why it has no
file), so the window's dump diffs against a full one by values inside the window and by
stats outside it. Both runtimes read the variable when the model runs.
"""

from __future__ import annotations

import inspect
import json
import sys

import pytest
import torch
from click.testing import CliRunner

import aoti_debug
from aoti_debug import config
from aoti_debug.cli import main as cli_main
from aoti_debug.errors import ConfigError
from tests.conftest import dump_dir_restored, only_run, records, run_python


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.b = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.b(torch.relu(self.norm(self.a(x))).sin())


def _launches_with_files(run: str) -> set[int]:
    return {r["launch"] for r in records(run) if r.get("file")}


@pytest.mark.parametrize("wrapper", ["python", "cpp"])
def test_only_the_listed_launches_are_saved(tmp_path, monkeypatch, wrapper):
    net, x = Net().eval(), torch.randn(4, 16)
    full, window = str(tmp_path / "full"), str(tmp_path / "window")
    torch._dynamo.reset()
    with dump_dir_restored(), torch.no_grad(), torch._inductor.config.patch(cpp_wrapper=wrapper == "cpp"), \
            aoti_debug.enabled(level="save", dump_dir=full):
        fn = torch.compile(net)
        fn(x)
        aoti_debug.enable(level="save", dump_dir=window)
        monkeypatch.setenv(config.ENV_SAVE_LAUNCHES, "2")
        fn(x)
        aoti_debug.flush()
    full_run, window_run = only_run(full), only_run(window)
    assert len(_launches_with_files(full_run)) >= 3, "the model should make several launches"
    assert _launches_with_files(window_run) == {2}
    outside = [r for r in records(window_run) if r["launch"] != 2 and r.get("kind") == "tensor"]
    assert outside and all(r.get("stats") and r.get("checksum") and not r.get("file") for r in outside)
    assert all(config.ENV_SAVE_LAUNCHES in r["skipped"] for r in outside)
    result = aoti_debug.diff(window_run, full_run)
    assert result.exit_code == 0, str(result)
    compared = [r for r in records(full_run) if not r.get("uninitialised")]
    assert result.counts.get("pass", 0) == len(compared), result.counts  # every value compared


def test_launch_ranges_parse():
    assert config.parse_launch_ranges("12") == ((12, 12),)
    assert config.parse_launch_ranges(" 1..3, 7 ,9..") == ((1, 3), (7, 7), (9, None))
    assert config.parse_launch_ranges("") is None
    settings = config.RunSettings(save_launches=((1, 3), (9, None)))
    assert [n for n in range(1, 12) if settings.saves(n)] == [1, 2, 3, 9, 10, 11]
    for bad in ("5..2", "a", "..3", "3...4", "-1", "1,,2"):
        with pytest.raises(ConfigError, match=config.ENV_SAVE_LAUNCHES):
            config.parse_launch_ranges(bad)


def test_bad_value_from_the_environment_saves_everything_with_one_warning(tmp_path):
    code = ("import torch, aoti_debug\n"
            "f = torch.compile(lambda x: torch.sin(x) * 2 + 1)\n"
            "f(torch.ones(8)); aoti_debug.flush(); print('ok')")
    proc = run_python(code, env={"AOTI_DEBUG_LEVEL": "save", "AOTI_DEBUG_DIR": str(tmp_path),
                                 config.ENV_SAVE_LAUNCHES: "9..1"})
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
    assert proc.stderr.count(config.ENV_SAVE_LAUNCHES) == 1 and "Traceback" not in proc.stderr
    assert _launches_with_files(only_run(str(tmp_path)))


#: A script that must not import this module: tests.conftest clears AOTI_DEBUG_LEVEL.
SCRIPT = "import torch\n" + inspect.getsource(Net) + """
net = Net().eval()
if {perturb}:
    with torch.no_grad():
        net.norm.weight.mul_(1.5)
with torch.no_grad():
    torch.compile(net)(torch.ones(4, 16))
"""


def test_from_diff_saves_the_window_of_the_first_divergence(tmp_path):
    runner = CliRunner()

    def run(name, *extra, perturb=False):
        script = tmp_path / f"{name}.py"
        script.write_text(SCRIPT.format(perturb=perturb))
        args = ["run", *extra, "--dir", str(tmp_path / name), "--", sys.executable, str(script)]
        proc = run_python(f"import sys; from aoti_debug.cli import main; sys.argv = ['aoti-debug', *{args!r}]; main()")
        assert proc.returncode == 0, proc.stderr
        return only_run(str(tmp_path / name))

    good, bad = run("good", "--level", "stats"), run("bad", "--level", "stats", perturb=True)
    report = tmp_path / "report.json"
    res = runner.invoke(cli_main, ["diff", bad, good, "--format", "json", "-o", str(report)])
    assert res.exit_code == 1, res.output
    first = json.loads(report.read_text())["first_divergence"]["launch"]
    window = run("window", "--from-diff", str(report), "--context", "1", perturb=True)
    assert _launches_with_files(window) == {n for n in (first - 1, first) if n >= 1}
    again = aoti_debug.diff(window, good)
    assert again.first_divergence is not None and again.first_divergence.launch == first
    # One-line errors for what cannot be used.
    res = runner.invoke(cli_main, ["run", "--from-diff", str(tmp_path / "missing.json"), "--", "true"])
    assert res.exit_code == 2 and "cannot read" in res.output
    (tmp_path / "equal.json").write_text(json.dumps({"first_divergence": None}))
    res = runner.invoke(cli_main, ["run", "--from-diff", str(tmp_path / "equal.json"), "--", "true"])
    assert res.exit_code == 2 and "names no first divergence" in res.output
    res = runner.invoke(cli_main, ["run", "--save-launches", "3..1", "--", "true"])
    assert res.exit_code == 2 and "ends before it starts" in res.output and "Traceback" not in res.output
    res = runner.invoke(cli_main, ["run", "--level", "stats", "--save-launches", "3", "--", "true"])
    assert res.exit_code == 2 and "not level stats" in res.output
