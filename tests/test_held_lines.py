"""The C++ runtime's held manifest lines (native/manifest.h): once a wrapper has ended a
graph call (``call_end``, emitted before it hands back its outputs), its sides' lines are
held until the call ends and written in one write; a sync site writes at once; held lines
reach the manifest at ``aoti_debug.flush()``, at exit, on a crash signal and on SIGTERM
(the handler it replaced still runs), and a forked child never writes its parent's.

A program drives the runtime's entry points as a wrapper does (scalar values: no tensors,
no model), and prints the manifest's size after each step; a compiled model checks that
the generated wrapper ends its calls and that its records are complete after each call."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.conftest import build_harness, only_run, records, run_dirs

HARNESS = r"""
#include "entry.h"
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cstdio>
#include <cstdlib>
#include <string>
using namespace aoti_debug_rt_1;
static const Arg kArg[1] = {{"n", "input", "scalar", "n", 0, 0, ""}};
static Site site(int id, const char* kernel, int sync) {
  return Site{"", kernel, kernel, schema::kStats, sync, 1, 1, kArg, "", "before,after", __FILE__, __LINE__,
              "", "", "", id, ""};
}
static Graph g{nullptr, nullptr};
static void launch(const Site& s, int64_t v) {  // what a wrapper's launch does: 2 records
  Token t{0, 0};
  Value x(v);
  entry_launch(&g, &t, &s, &x, 1);
  entry_done(&g, &t, &s, &x, 1);
}
static long size() {  // the manifest's size now
  struct stat st;
  std::string path = shared().path + "/manifest.jsonl";
  return ::stat(path.c_str(), &st) == 0 ? static_cast<long>(st.st_size) : -1;
}
static void say(const char* what) { std::printf("%s %ld\n", what, size()); std::fflush(stdout); }
static void previous(int) {
  const char m[] = "previous handler ran\n";
  (void)!::write(2, m, sizeof(m) - 1);
  ::_exit(3);
}
int main(int argc, char** argv) {
  std::string mode = argv[1];
  if (mode == "segv") ::signal(SIGSEGV, &previous);  // what was there before the runtime's
  Site s0 = site(0, "k0", 0), s1 = site(1, "k1", 0), sync = site(2, "synced", 1);
  launch(s0, 1);  // call 1: no call end seen yet, so each side is written at once
  say("call1-k0");
  launch(s1, 1);
  entry_call_end(&g);
  say("call1-end");
  launch(s0, 2);  // call 2: held
  say("call2-k0");
  launch(s1, 2);
  say("call2-k1");
  if (mode == "calls") {
    launch(sync, 2);
    say("call2-sync");
    launch(s0, 2);
    say("call2-k0-again");
    entry_call_end(&g);
    say("call2-end");
  } else if (mode == "flush") {
    aoti_debug_runtime_flush();
    say("flushed");
  } else if (mode == "segv") {
    ::raise(SIGSEGV);
  } else if (mode == "abort") {
    std::abort();
  } else if (mode == "term") {
    ::kill(::getpid(), SIGTERM);
  } else if (mode == "fork") {
    pid_t child = ::fork();
    if (child == 0) {  // its own run; what its parent held is not its to write
      launch(s0, 9);
      entry_call_end(&g);
      std::exit(0);  // (exit hooks run in the child too)
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    say("child-done");
    entry_call_end(&g);
    say("call2-end");
  }
  return 0;  // "exit": what is held goes at exit
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    return build_harness(tmp_path_factory.mktemp("held"), HARNESS)


def _drive(harness: str, tmp_path, mode: str) -> tuple[subprocess.CompletedProcess, dict[str, int], str]:
    root = str(tmp_path / mode)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTI_DEBUG")}
    proc = subprocess.run([harness, mode], env={**env, "AOTI_DEBUG_DIR": root}, capture_output=True, text=True,
                          timeout=120)
    sizes = {k: int(v) for k, v in (line.split() for line in proc.stdout.splitlines())}
    return proc, sizes, root


def _calls(run: str) -> list[tuple[str, int, str]]:
    return [(r["kernel"], r["value"], r["phase"]) for r in records(run)]


#: What the harness records before its mode: call 1 (k0, k1) and call 2's k0, k1.
BEFORE_MODE = [(k, call, phase) for call in (1, 2) for k in ("k0", "k1") for phase in ("before", "after")]


def test_sides_hold_their_lines_until_the_call_ends(harness, tmp_path):
    proc, size, root = _drive(harness, tmp_path, "calls")
    assert proc.returncode == 0, proc.stderr
    assert 0 < size["call1-k0"] < size["call1-end"], size  # no call end seen yet: written side by side
    assert size["call2-k0"] == size["call2-k1"] == size["call1-end"], size  # held
    assert size["call2-sync"] > size["call2-k1"], size  # a sync site writes at once, after what was held
    assert size["call2-k0-again"] == size["call2-sync"] < size["call2-end"], size
    recs = records(only_run(root))
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))  # in order, each once
    assert _calls(only_run(root)) == BEFORE_MODE + [("synced", 2, "before"), ("synced", 2, "after"),
                                                    ("k0", 2, "before"), ("k0", 2, "after")]


def test_flush_writes_what_is_held(harness, tmp_path):
    proc, size, root = _drive(harness, tmp_path, "flush")
    assert proc.returncode == 0, proc.stderr
    assert size["flushed"] > size["call2-k1"] == size["call1-end"], size
    assert _calls(only_run(root)) == BEFORE_MODE


def test_exit_writes_what_is_held(harness, tmp_path):
    proc, _size, root = _drive(harness, tmp_path, "exit")
    assert proc.returncode == 0, proc.stderr
    assert _calls(only_run(root)) == BEFORE_MODE


@pytest.mark.parametrize("mode, returncode", [("abort", -signal.SIGABRT), ("term", -signal.SIGTERM),
                                              ("segv", 3)])
def test_a_signal_writes_what_is_held_and_still_ends_the_process(harness, tmp_path, mode, returncode):
    """SIGABRT and SIGTERM with their default action: the process still dies of them; a
    SIGSEGV handler installed before the runtime's still runs after it (it exits with 3)."""
    proc, _size, root = _drive(harness, tmp_path, mode)
    assert proc.returncode == returncode, proc.stderr
    assert ("previous handler ran" in proc.stderr) == (mode == "segv")
    assert _calls(only_run(root)) == BEFORE_MODE


def test_a_forked_child_writes_none_of_its_parents_held_lines(harness, tmp_path):
    proc, size, root = _drive(harness, tmp_path, "fork")
    assert proc.returncode == 0, proc.stderr
    assert size["child-done"] == size["call2-k1"] < size["call2-end"], size
    runs = run_dirs(root)
    assert len(runs) == 2, runs
    by_count = sorted((_calls(r) for r in runs), key=len)
    assert by_count == [[("k0", 9, "before"), ("k0", 9, "after")], BEFORE_MODE]
