"""Turning results into text: a terminal table, CSV, JSON, Markdown or HTML.

Table, Markdown and HTML show a dump's strings (kernel, arg and module names, source
lines, messages) through :func:`~aoti_debug.printable.printable`: control characters as
escapes, never raw. CSV and JSON keep them exact.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from ..printable import printable
from .result import NOT_COMPARED, DiffResult
from .births import Birth
from .show import RunSummary, ShowResult, describe_flight, format_bytes, graph_title
from .metrics import default_tolerance
from .value_align import reference_mode

FORMATS = ("table", "csv", "json", "markdown", "html")

#: Terminal-table columns of a diff: (frame column, header).
_DIFF_COLUMNS = (
    ("status", "status"), ("launch_a", "launch"), ("graph", "graph"), ("kernel", "kernel"), ("module", "module"),
    ("call", "call"),
    ("phase", "phase"), ("arg", "arg"), ("dtype", "dtype"), ("shape", "shape"), ("max_abs", "max_abs"),
    ("max_rel", "max_rel"), ("mismatch", "mismatch"), ("cosine", "cosine"), ("nan", "nan a/b"),
    ("inf", "inf a/b"), ("basis", "basis"), ("note", "note"),
)
#: Against an fp64 reference the verdict replaces the tolerance's mismatch count.
_VERDICT_COLUMNS = tuple(c for c in _DIFF_COLUMNS if c[0] != "mismatch")[:-2] + (
    ("verdict", "verdict"), ("ratio", "x eager"), ("basis", "basis"), ("note", "note"))


def _diff_columns(result: DiffResult):
    return _VERDICT_COLUMNS if result.rounding_factor is not None else _DIFF_COLUMNS
_SHOW_COLUMNS = ("graph", "kernel", "op", "module", "calls", "records", "bytes", "min", "max", "absmax", "nan", "inf")
_BIRTH_COLUMNS = (("born", "born"), ("launch", "launch"), ("graph", "graph"), ("kernel", "kernel"), ("op", "op"),
                  ("call", "call"), ("nan", "nan"), ("inf", "inf"), ("outputs", "outputs"),
                  ("inputs", "inputs held"), ("source", "source"))
#: Births per kind in a table (``--format json`` has them all).
_BIRTH_ROWS = 20


def _num(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return str(v) if math.isinf(v) else f"{v:.3g}"
    return str(v)


def _pct(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return "0%" if v == 0 else ("<0.01%" if v < 1e-4 else f"{v:.2%}")


def _cos(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.6f}"


def _clip(text: Any, width: int) -> str:
    s = "" if text is None else printable(text)
    return s if len(s) <= width else s[: width - 1] + "~"


def _clip_left(text: Any, width: int) -> str:
    """Keep the end (a module path's last parts say the most: ``~h.1.ln_1``)."""
    s = "" if text is None else printable(text)
    return s if len(s) <= width else "~" + s[len(s) - width + 1:]


def _pair(a: Any, b: Any) -> str:
    if a is None and b is None:
        return "-"
    return f"{_num(a)}/{_num(b)}"


def _diff_rows(result: DiffResult, clip: bool, show_all: bool = True) -> list[dict]:
    rows = []
    for rc in result.ordered():
        if rc.status in NOT_COMPARED and not show_all:
            continue
        r = rc.to_row()
        status = r["status"] + (" *" if r["first"] else "")
        cells = {
            "status": status, "launch_a": _num(r["launch_a"] if r["launch_a"] is not None else r["launch_b"]),
            "graph": r["graph"], "kernel": _clip(r["kernel"], 40) if clip else r["kernel"],
            "module": (_clip_left(r["module"], 28) if clip else r["module"]) if r["module"] else "-", "call": r["call"],
            "phase": r["phase"], "arg": _clip(r["arg"], 24) if clip else r["arg"], "dtype": r["dtype"],
            "shape": _clip(r["shape"], 18) if clip else r["shape"], "max_abs": _num(r["max_abs"]),
            "max_rel": _num(r["max_rel"]), "mismatch": _pct(r["mismatch"]), "cosine": _cos(r["cosine"]),
            "nan": _pair(r["nan_a"], r["nan_b"]), "inf": _pair(r["inf_a"], r["inf_b"]), "basis": r["basis"] or "-",
            "note": _clip(r["note"], 70) if clip else r["note"],
            "verdict": r["verdict"] or "-", "ratio": _num(r["ratio"]),
        }
        rows.append(cells)
    return rows


def _writer(info) -> str:
    """``python writer``, or ``eager reference (fp64)`` for a run of ``aoti-debug run --reference``."""
    mode = reference_mode(info)
    return f"eager reference ({mode})" if mode else f"{info.writer} writer"


def _tolerance_line(result: DiffResult) -> str:
    if result.rounding_factor is not None:
        low = f" ({result.low_precision_factor:g}x in bfloat16, float16 and float8)" \
            if result.low_precision_factor is not None else ""
        return f"verdict against float64: rounding up to {result.rounding_factor:g}x eager's own error{low}"
    if result.atol is not None and result.rtol is not None:
        return f"tolerance atol={result.atol:g} rtol={result.rtol:g}"
    seen = sorted({rc.record.dtype for rc in result.records if rc.record.dtype})
    parts = []
    for dt in seen[:4]:
        atol, rtol = default_tolerance(dt)
        atol = result.atol if result.atol is not None else atol
        rtol = result.rtol if result.rtol is not None else rtol
        parts.append(f"{dt} atol={atol:g} rtol={rtol:g}")
    return "tolerance per dtype" + (f" ({'; '.join(parts)})" if parts else " (as torch.testing.assert_close)")


def _diff_header(result: DiffResult) -> list[str]:
    lines = []
    for side, path, info in (("A", result.path_a, result.info_a), ("B", result.path_b, result.info_b)):
        lines.append(f"{side}: {path}  (level {info.level or '?'}, {_writer(info)}, {info.device or '?'})")
    lines.append(f"{result.basis_line()}; {_tolerance_line(result)}; B is the reference"
                 + (f"; kernels {result.kernels}" if result.kernels else ""))
    if result.first_divergence is not None:
        first = result.first_divergence
        title = graph_title(first.graph, result.info_a.graphs.get(first.graph))
        lines.append(f"FIRST DIVERGENCE: {first}".replace(f" {first.graph} ", f" {title} ", 1))
    elif result.counts.get("fail"):
        lines.append("FIRST DIVERGENCE: none found among the aligned launches")
    if result.birth_differences:
        lines.append("NaN/Inf births that differ:")
        lines.extend(f"  {line}" for line in result.birth_differences[:MAX_RECORD_MESSAGES])
        if len(result.birth_differences) > MAX_RECORD_MESSAGES:
            lines.append(f"  ... and {len(result.birth_differences) - MAX_RECORD_MESSAGES} more (--format json lists all)")
    return [printable(line) for line in lines]


#: At most this many per-record messages are printed under a table.
MAX_RECORD_MESSAGES = 20


def _record_messages(result: DiffResult) -> list[str]:
    """One full line per record that could not be compared (the table clips notes)."""
    lines = []
    bad = [rc for rc in result.ordered() if rc.status in ("error", "mismatch")]
    for rc in bad[:MAX_RECORD_MESSAGES]:
        if rc.status == "error":
            lines.append(f"error: {rc.note}")
        else:
            r = rc.record
            lines.append(f"mismatch: seq {r.seq} {rc.kernel} call {r.kernel_call} {r.phase} {rc.arg}: {rc.note}")
    if len(bad) > MAX_RECORD_MESSAGES:
        lines.append(f"... and {len(bad) - MAX_RECORD_MESSAGES} more (--format csv lists every record)")
    return lines


def _diff_footer(result: DiffResult, show_all: bool) -> list[str]:
    lines = []
    passing = result.counts.get("pass", 0)
    shown = sum(1 for rc in result.records if rc.status == "pass")
    if passing > shown and not show_all and not result.dropped:
        lines.append(f"({passing - shown} passing record(s) not listed; --all lists them)")
    if result.dropped:
        lines.append(f"({result.dropped} more record(s) compared but not listed; --limit raises the cap)")
    apart = [f"{result.counts[s]} {s}" for s in NOT_COMPARED if result.counts.get(s)]
    if apart:
        reasons = sorted({rc.note for rc in result.records if rc.status == "volatile"})
        lines.append(f"not compared: {', '.join(apart)}" + (f" ({'; '.join(reasons[:3])})" if reasons else "")
                     + ("" if show_all else "; --all lists them"))
    lines.extend(_record_messages(result))
    for n in result.notes:
        lines.append(f"note: {n}")
    for p in result.problems:
        lines.append(f"problem: {p}")
    lines.append(str(result).split("; first divergence")[0])
    return [printable(line) for line in lines]


def _text_table(rows: list[dict], columns) -> str:
    import pandas as pd

    if not rows:
        return ""
    rows = [{c: printable(r.get(c)) for c, _ in columns} for r in rows]
    frame = pd.DataFrame(rows, columns=[c for c, _ in columns]).astype(str)
    frame.columns = [h for _, h in columns]
    # Left-align every cell: pandas right-aligns strings by default.
    widths = {h: max([len(h), *map(len, frame[h])]) for h in frame.columns}
    formatters = {h: (lambda v, w=widths[h]: v.ljust(w)) for h in frame.columns}
    return "\n".join(line.rstrip() for line in frame.to_string(
        index=False, justify="left", formatters=formatters).splitlines())


def _markdown_table(rows: list[dict], columns) -> str:
    if not rows:
        return ""
    head = "| " + " | ".join(h for _, h in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(printable(r.get(c, "")).replace("|", "\\|") for c, _ in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def _html_table(rows: list[dict], columns) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(printable(r.get(c, '')))}</td>" for c, _ in columns) + "</tr>"
                   for r in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>{body}</tbody>\n</table>"


def _html_page(title: str, paragraphs: list[str], tables: list[str]) -> str:
    title = printable(title)
    ps = "\n".join(f"<p>{html.escape(printable(p))}</p>" for p in paragraphs)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;"
            f"font-family:monospace}}</style></head>\n<body>\n<h1>{html.escape(title)}</h1>\n{ps}\n"
            + "\n".join(tables) + "\n</body></html>\n")


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=1, default=str, allow_nan=False) + "\n"


def render_diff(result: DiffResult, fmt: str = "table", show_all: bool = False) -> str:
    """The diff as text in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "json":
        return _dumps(result.to_dict())
    if fmt == "csv":
        return result.to_frame().to_csv(index=False)
    header = _diff_header(result)
    footer = _diff_footer(result, show_all)
    if fmt == "markdown":
        table = _markdown_table(_diff_rows(result, False, show_all), _diff_columns(result))
        return "\n\n".join(["# aoti-debug diff", "\n".join(f"- {h}" for h in header), table,
                            "\n".join(f"- {f}" for f in footer)]) + "\n"
    if fmt == "html":
        return _html_page("aoti-debug diff", header + footer,
                          [_html_table(_diff_rows(result, False, show_all), _diff_columns(result))])
    table = _text_table(_diff_rows(result, True, show_all), _diff_columns(result))
    parts = ["\n".join(header)]
    if table:
        parts.append(table)
    parts.append("\n".join(footer))
    return "\n\n".join(parts) + "\n"


def _show_rows(run: RunSummary) -> list[dict]:
    rows = []
    for k in run.kernels:
        rows.append({"graph": run.graph_title(k.graph), "kernel": k.kernel, "op": k.op if k.op != k.kernel else "",
                     "module": k.module,
                     "calls": k.calls, "records": k.records, "bytes": format_bytes(k.bytes), "min": _num(k.min),
                     "max": _num(k.max), "absmax": _num(k.absmax), "nan": k.nan, "inf": k.inf})
    return rows


def _birth_rows(run: RunSummary, limit: int | None = _BIRTH_ROWS) -> list[dict]:
    rows = []
    for births in (run.births.nan, run.births.inf):
        for b in births[:limit]:
            name = "NaN" if b.value == "nan" else "Inf"
            rows.append({"born": f"{name}?" if b.candidate else name, "launch": b.launch,
                         "graph": run.graph_title(b.graph), "kernel": b.kernel, "op": b.op if b.op != b.kernel else "",
                         "call": b.kernel_call, "nan": b.nan, "inf": b.inf, "outputs": ", ".join(b.outputs),
                         "inputs": b.inputs_held, "source": ", ".join(b.source)})
    return rows


def _births_title(run: RunSummary) -> str:
    b = run.births
    more = [f"{len(x) - _BIRTH_ROWS} more {name}" for name, x in (("NaN", b.nan), ("Inf", b.inf))
            if len(x) > _BIRTH_ROWS]
    kind = "NaN/Inf births" if b.complete else "NaN/Inf birth candidates (\"?\": inputs not recorded)"
    return (f"{kind}: {len(b.nan)} NaN, {len(b.inf)} Inf (NaN births listed first, each kind in launch order)"
            + (f" ({', '.join(more)}: --format json lists all)" if more else ""))


def _headline(run: RunSummary, b: Birth | None, name: str, others: int) -> str | None:
    if b is None:
        return None
    more = f" (+{others} more {name} birth(s))" if others else ""
    return b.describe(run.graph_title(b.graph)) + more


def _run_lines(run: RunSummary) -> list[str]:
    info = run.info
    lines = [
        f"run {info.run_id or '?'}: {run.path}",
        f"level {info.level or '?'}, {_writer(info)}, device {info.device or '?'}, torch {info.torch_version or '?'}"
        + (f", rank {info.rank}/{info.world_size}" if info.world_size > 1 else ""),
        f"{len(run.graphs)} graph(s) ({', '.join(map(run.graph_title, run.graphs)) or '-'}), "
        f"{len(run.kernels)} kernel(s), {run.launches} launch(es), {run.records} record(s), {run.tensors} tensor(s), "
        f"{format_bytes(run.bytes)} in {run.files} file(s)",
    ]
    # Where NaN was born first, then Inf: a mask kernel making -inf never hides a NaN birth.
    births = run.births
    lines += [h for h in (_headline(run, births.first_nan, "NaN", len(births.nan) - 1),
                          _headline(run, births.first_inf, "Inf", len(births.inf) - 1)) if h]
    lines += describe_flight(info.flight)
    if run.first_nan is None and run.first_inf is None:
        lines.append("first NaN/Inf: none")
    else:
        if births.complete and not births.nan and not births.inf:
            lines.append("no launch made NaN/Inf from inputs without it: they came in from outside the "
                         "instrumented launches")
        lines.append(f"first NaN: {run.first_nan or 'none'}")
        lines.append(f"first Inf: {run.first_inf or 'none'}")
    lines += [f"note: {n}" for n in births.notes]
    lines += [f"note: {n}" for n in run.notes]
    lines += [f"problem: {p}" for p in run.problems]
    return [printable(line) for line in lines]


def render_show(result: ShowResult, fmt: str = "table") -> str:
    """What a dump holds, in ``fmt`` (one of :data:`FORMATS`)."""
    columns = [(c, c) for c in _SHOW_COLUMNS]
    if fmt == "json":
        return _dumps(result.to_dict())
    if fmt == "csv":
        return result.to_frame().to_csv(index=False)
    if fmt == "html":
        paras, tables = [], []
        for run in result.runs:
            paras.extend(_run_lines(run))
            if _birth_rows(run):
                tables.append(f"<h2>{html.escape(_births_title(run))}</h2>\n"
                              + _html_table(_birth_rows(run), _BIRTH_COLUMNS))
            tables.append(_html_table(_show_rows(run), columns))
        return _html_page(f"aoti-debug show {result.path}", paras, tables)
    blocks = []
    if len(result.runs) > 1:
        blocks.append(printable(f"{result.path}: {len(result.runs)} runs"))
    for run in result.runs:
        lines = _run_lines(run)
        births = _birth_rows(run)
        if fmt == "markdown":
            born = f"### {_births_title(run)}\n\n{_markdown_table(births, _BIRTH_COLUMNS)}\n\n" if births else ""
            blocks.append(f"## {lines[0]}\n\n" + "\n".join(f"- {l}" for l in lines[1:]) + "\n\n" + born
                          + _markdown_table(_show_rows(run), columns))
        else:
            born = f"{_births_title(run)}\n{_text_table(births, _BIRTH_COLUMNS)}\n\n" if births else ""
            blocks.append("\n".join(lines) + "\n\n" + born + _text_table(_show_rows(run), columns))
    return "\n\n".join(blocks) + "\n"
