"""Writing a run: its directory, ``run.json`` and the append-only manifest."""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from .schema import FORMAT_VERSION, MANIFEST_FILE, RUN_FILE, TENSOR_DIR, RunInfo


def _process_start_stamp(pid: int) -> str:
    """Local wall-clock start time of a process, ``YYYYmmdd-HHMMSS`` (Linux /proc; else now).

    Derived from the process rather than "now" so that every runtime inside one
    process (the Python one and the C++ one in a cpp_wrapper module) and every rank
    started by one launcher can agree on the same run id without talking.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
        start = btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        start = time.time()
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(start))


def default_run_id(world_size: int = 1) -> str:
    """``<start>-p<pid>``; for a multi-rank job the launcher's (parent's) identity."""
    if world_size > 1:
        ppid = os.getppid()
        return f"{_process_start_stamp(ppid)}-p{ppid}"
    pid = os.getpid()
    return f"{_process_start_stamp(pid)}-p{pid}"


def run_directory(root: str, run_id: str, rank: int = 0, world_size: int = 1) -> str:
    path = os.path.join(root, run_id)
    if world_size > 1:
        path = os.path.join(path, f"rank{rank}")
    return path


class RunWriter:
    """Owns one run directory: creates it, keeps ``run.json`` current, appends records.

    Every manifest line is written with one ``write`` and flushed, so a run that is
    killed leaves a manifest that is valid up to its last complete line.
    """

    def __init__(self, path: str, info: RunInfo):
        self.path = path
        self.info = info
        os.makedirs(os.path.join(path, TENSOR_DIR), exist_ok=True)
        self.write_info()
        self._manifest = open(os.path.join(path, MANIFEST_FILE), "a", encoding="utf-8")

    def write_info(self) -> None:
        tmp = os.path.join(self.path, f".{RUN_FILE}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.info.to_dict(), f, indent=1, sort_keys=True)
        os.replace(tmp, os.path.join(self.path, RUN_FILE))

    def tensor_path(self, filename: str) -> str:
        return os.path.join(self.path, TENSOR_DIR, filename)

    def append(self, record: dict) -> None:
        self._manifest.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._manifest.flush()

    def close(self) -> None:
        try:
            self._manifest.close()
        except OSError:
            pass


def new_run_info(run_id: str, level: str, rank: int, world_size: int, **extra) -> RunInfo:
    from .. import __version__

    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - torch is a hard dependency
        torch_version = ""
    return RunInfo(
        format_version=FORMAT_VERSION,
        run_id=run_id,
        level=level,
        pid=os.getpid(),
        start_time=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        aoti_debug_version=__version__,
        torch_version=torch_version,
        argv=list(sys.argv),
        rank=rank,
        world_size=world_size,
        hostname=socket.gethostname(),
        **extra,
    )
