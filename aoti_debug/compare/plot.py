"""Drawing a diff: the error of each compared value along the model, as PNG or SVG.

x is the launch number in run A, y the max absolute and the max relative error
against run B (the reference) on log scales, one panel each. Values that are exactly
equal sit on a "0" line at the bottom and NaN/Inf errors on a line at the top, so no
compared value is dropped for want of a logarithm. Points are coloured by group
(:func:`group_of`); failing values are diamonds, passing ones dots; a dashed line
marks the first divergence.

Against an fp64 reference (``aoti-debug run --reference fp64``) the panels are the RMS
error of each value against float64, with eager's own error beside it (grey crosses),
and their ratio, with the line up to which a value is ``rounding``: ``suspect`` values
are the diamonds above it.

Only outputs (``after`` records) are drawn: an input is the output of an earlier
launch, drawn there already. A dump without ``after`` records has its inputs drawn.
Pairs that were not compared by value (volatile, uninitialised, ignored, unpaired,
only in one run, shape/dtype mismatch, unreadable) are counted in a footnote.

matplotlib is imported inside the functions that draw: it is an optional extra
(``pip install aoti_debug[plot]``), and the figure is drawn on the Agg canvas
without pyplot, so no global backend or figure registry is touched.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Iterable

from ..errors import PlotError
from .result import DiffResult, RecordComparison

#: File suffix -> the format the figure is saved in.
PLOT_FORMATS = {".png": "png", ".svg": "svg"}
#: Groups with a colour and a legend entry of their own; the rest share "other".
MAX_GROUPS = 12
OTHER = "other"
#: Above this many points the scatter of an SVG is embedded as an image (file size).
_RASTERIZE_ABOVE = 20000
_KERNEL_NUMBER = re.compile(r"_\d+$")
_METRICS = (("max_abs", "max abs error"), ("max_rel", "max rel error (vs |B|)"))
_FP64_METRICS = (("rmse", "RMS error vs float64\n(x: eager's own)"), ("ratio", "error / eager's own"))


@dataclasses.dataclass(frozen=True)
class PlotPoint:
    """One compared value as the plot draws it."""

    launch: int
    group: str
    kernel: str
    arg: str
    failed: bool
    max_abs: float | None
    max_rel: float | None
    nonfinite: bool
    """The NaN or Inf counts of A and B differ: the error is NaN/Inf whatever the
    finite elements say."""
    rmse: float | None = None
    eager: float | None = None
    """Against an fp64 reference: eager's own RMS error (the reference record's)."""
    ratio: float | None = None
    verdict: str | None = None

    def error(self, metric: str) -> tuple[str, float]:
        """Where the point sits on the panel of ``metric`` (``max_abs`` or ``max_rel``):
        ``("zero", 0.0)``, ``("value", v)`` with v > 0, or ``("special", nan)`` for a
        NaN/Inf error or a difference that has no measure (a non-numeric scalar)."""
        v = getattr(self, metric)
        if self.nonfinite or (v is not None and not math.isfinite(v)):
            return "special", math.nan
        if v is None:
            return ("special", math.nan) if self.failed else ("zero", 0.0)
        return ("zero", 0.0) if v == 0 else ("value", float(v))


def group_of(comparison: RecordComparison) -> str:
    """The label a value is coloured by: the provenance module path when the comparison
    carries one (``module``), else its graph and kernel name without the trailing
    ``_<n>`` (``graph0 cpp_fused_relu``), so that launches of one kind of kernel share
    a colour."""
    module = getattr(comparison, "module", None)
    if module:
        return str(module)
    rec = comparison.record
    stem = _KERNEL_NUMBER.sub("", rec.kernel)
    return f"{rec.graph} {stem}" if rec.graph else stem


def plot_points(result: DiffResult) -> tuple[list[PlotPoint], str]:
    """The values the plot draws, in run A's order, and the phase they are of.

    Pairs compared by value (``pass`` or ``fail``) of the ``after`` phase; of the
    ``before`` phase when the dump has no ``after`` records.
    """
    pairs = [rc for rc in result.every_pair()
             if rc.status in ("pass", "fail") and rc.metrics is not None and rc.a is not None]
    phase = "after" if any(rc.a.phase == "after" for rc in pairs) else "before"
    points = []
    for rc in pairs:
        if rc.a.phase != phase:
            continue
        m = rc.metrics
        nonfinite = (m.nan_a or 0) != (m.nan_b or 0) or (m.inf_a or 0) != (m.inf_b or 0)
        eager = rc.b.eager_error if rc.b is not None else None
        points.append(PlotPoint(launch=rc.a.launch, group=group_of(rc), kernel=rc.kernel, arg=rc.arg,
                                failed=rc.status == "fail", max_abs=m.max_abs, max_rel=m.max_rel,
                                nonfinite=nonfinite, rmse=m.rmse,
                                eager=float(eager) if isinstance(eager, (int, float)) else None,
                                ratio=rc.ratio, verdict=rc.verdict))
    return points, phase


def ranked_groups(points: Iterable[PlotPoint], limit: int = MAX_GROUPS) -> list[str]:
    """The groups that get a colour of their own, in the order they first appear.

    At most ``limit``: groups with a failing value first, then those with the larger
    worst error (NaN/Inf worst of all), then the more numerous.
    """
    first: dict[str, int] = {}
    failed: dict[str, bool] = {}
    worst: dict[str, float] = {}
    count: dict[str, int] = {}
    for p in points:
        first.setdefault(p.group, p.launch)
        failed[p.group] = failed.get(p.group, False) or p.failed
        band, v = p.error("max_abs")
        worst[p.group] = max(worst.get(p.group, 0.0), math.inf if band == "special" else v)
        count[p.group] = count.get(p.group, 0) + 1
    chosen = sorted(first, key=lambda g: (not failed[g], -worst[g], -count[g], first[g]))[:limit]
    return sorted(chosen, key=lambda g: first[g])


def plot_format(path) -> str:
    """The image format that ``path`` names by its suffix (``png`` or ``svg``).

    Raises:
        PlotError: any other suffix.
    """
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix not in PLOT_FORMATS:
        raise PlotError(f"{os.fspath(path)}: a plot is written as .png or .svg, not "
                        f"{suffix or 'a file without a suffix'}")
    return PLOT_FORMATS[suffix]


def require_matplotlib() -> None:
    """Check that matplotlib can be imported, before any work that a plot would end.

    Raises:
        PlotError: matplotlib is not installed.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError("drawing a plot needs matplotlib, which is not installed: pip install matplotlib "
                        "(or pip install 'aoti_debug[plot]')") from None


def _short(path: str) -> str:
    """The last two parts of a run path: the dump directory and the run id."""
    parts = os.path.normpath(path).split(os.sep)
    return os.path.join(*parts[-2:]) if len(parts) >= 2 else path


def _clip_left(text: str, width: int = 48) -> str:
    """A long module path keeps its tail, the part that names the layer."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _footnote(result: DiffResult, phase: str) -> str:
    drawn = "outputs (after each launch)" if phase == "after" else "inputs (the dump has no outputs)"
    lines = [f"x: launch in run A; y: log scale, \"0\" = exactly equal; {drawn}"]
    apart = [f"{n} {s.replace('_', ' ')}" for s, n in result.counts.items() if s not in ("pass", "fail") and n]
    if apart:
        lines.append("not compared by value, not drawn: " + ", ".join(apart))
    if result.compared is None and not result.kept_passing:
        lines.append("passing values were not kept (diff(keep_passing=False)): only failures drawn")
    elif result.compared is None and result.dropped:
        lines.append(f"{result.dropped} pair(s) not kept (max_records) are not drawn")
    if result.stats_only:
        lines.append("stats-level dump: errors are over the recorded stats, not the elements")
    return "\n".join(lines)


def _axis_bounds(values: list[float]) -> tuple[float, float]:
    """The y of the "0" line and of the NaN/Inf line: a decade beyond the values."""
    lo = min(values) if values else 1.0
    hi = max(values) if values else 1.0
    return 10.0 ** (math.floor(math.log10(lo)) - 1), 10.0 ** (math.ceil(math.log10(hi)) + 1)


def _ticks(floor: float, ceiling: float, special: bool) -> tuple[list[float], list[str]]:
    """Decade ticks between the lines, the "0" line and, when used, the NaN/Inf line."""
    lo, hi = round(math.log10(floor)) + 1, round(math.log10(ceiling)) - 1
    step = max(1, math.ceil((hi - lo + 1) / 12))
    decades = list(range(lo, hi + 1, step))
    ticks = [floor] + [10.0 ** k for k in decades] + ([ceiling] if special else [])
    labels = ["0"] + [f"1e{k}" for k in decades] + (["NaN/Inf"] if special else [])
    return ticks, labels


def _palette(groups: list[str]) -> dict[str, object]:
    import matplotlib

    tab20 = matplotlib.colormaps["tab20"].colors
    # The strong colours first, then their light pairs; tab20's greys (7th pair) are
    # left to "other".
    colours = [c for i, c in enumerate(tab20[0::2]) if i != 7] + [c for i, c in enumerate(tab20[1::2]) if i != 7]
    palette = {g: colours[i % len(colours)] for i, g in enumerate(groups)}
    palette[OTHER] = "0.6"
    return palette


def _draw_panel(ax, points: list[PlotPoint], metric: str, label: str, palette: dict, rasterized: bool) -> None:
    placed = [(p, *p.error(metric)) for p in points]
    values = [v for _, band, v in placed if band == "value"]
    special = any(band == "special" for _, band, _ in placed)
    floor, ceiling = _axis_bounds(values)
    y_of = {"zero": floor, "special": ceiling}

    for group, colour in palette.items():
        for failed in (False, True):
            mine = [(p, band, v) for p, band, v in placed
                    if (p.group if p.group in palette else OTHER) == group and p.failed == failed]
            if not mine:
                continue
            xs = [p.launch for p, _, _ in mine]
            ys = [y_of.get(band, v) for _, band, v in mine]
            edges = ["crimson" if band == "special" else ("black" if failed else "none") for _, band, _ in mine]
            ax.scatter(xs, ys, s=42 if failed else 16, marker="D" if failed else "o", c=[colour], alpha=0.9,
                       edgecolors=edges, linewidths=[0 if e == "none" else 1.2 for e in edges],
                       zorder=3 if failed else 2, rasterized=rasterized)

    # The envelope of finite errors along the model: where it steps up, the error grew.
    envelope, worst = [], 0.0
    for p, band, v in sorted(placed, key=lambda t: t[0].launch):
        if band == "value" and v > worst:
            worst = v
            envelope.append((p.launch, v))
    if envelope:
        last = max(p.launch for p in points)
        xs, ys = zip(*(envelope + [(last, worst)]))
        ax.step(xs, ys, where="post", color="0.35", linewidth=0.8, zorder=1)

    ax.axhline(floor, color="0.5", linestyle=":", linewidth=0.8, zorder=0)
    if special:
        ax.axhline(ceiling, color="crimson", linestyle=":", linewidth=0.8, zorder=0)
    ax.set_yscale("log")
    ax.set_ylim(floor / 3, ceiling * 3)
    ticks, labels = _ticks(floor, ceiling, special)
    ax.set_yticks(ticks, labels)
    ax.minorticks_off()
    ax.set_ylabel(label)
    ax.grid(True, axis="y", which="major", alpha=0.3)


def _draw_verdicts(axes, points: list[PlotPoint], factor: float | None) -> None:
    """Eager's own error beside each compiled error, and the ratio up to which a value is
    ``rounding`` (the suspect kernels are the diamonds above it)."""
    eager = [(p.launch, p.eager) for p in points if p.eager is not None and p.eager > 0]
    if eager:
        xs, ys = zip(*eager)
        axes[0].scatter(xs, ys, s=14, marker="x", c="0.55", linewidths=0.8, zorder=2)
    if factor:
        axes[1].axhline(factor, color="darkorange", linestyle="-.", linewidth=1.0, zorder=1)
        axes[1].annotate(f"rounding up to {factor:g}x eager's own error; suspect above", xy=(0.0, factor),
                         xycoords=("axes fraction", "data"), xytext=(3, 3), textcoords="offset points",
                         fontsize=7, color="darkorange")


def _mark_first_divergence(axes, result: DiffResult, points: list[PlotPoint]) -> None:
    first = result.first_divergence
    if first is None:
        return
    for ax in axes:
        ax.axvline(first.launch, color="crimson", linestyle="--", linewidth=1.0, zorder=1)
    xs = [p.launch for p in points] + [first.launch]
    span = (max(xs) - min(xs)) or 1
    right = (first.launch - min(xs)) / span > 0.6  # keep the label over the axes
    how = {"born": "born here", "input": "enters through an input"}.get(first.kind, first.kind)
    if first.verdict is not None and first.ratio is not None:
        how = f"{first.verdict}: {first.ratio:.3g}x eager's own error"
    # Above the axes, where no point can hide it.
    axes[0].annotate(f"first divergence: {first.kernel} (launch {first.launch}, {how})",
                     xy=(first.launch, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 3),
                     textcoords="offset points", ha="right" if right else "left", va="bottom", fontsize=8,
                     color="crimson")


def _legends(axes, groups: list[str], palette: dict, has_other: bool, has_first: bool,
             verdicts: bool = False) -> None:
    from matplotlib.lines import Line2D

    def dot(colour, label, marker="o", edge="none"):
        return Line2D([], [], linestyle="", marker=marker, color=colour, markeredgecolor=edge, label=label)

    shown = [dot(palette[g], _clip_left(g)) for g in groups] + ([dot(palette[OTHER], OTHER)] if has_other else [])
    if shown:
        axes[0].legend(handles=shown, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title="group",
                       title_fontsize=8, frameon=False)
    if verdicts:
        status = [dot("0.4", "rounding"), dot("0.4", "suspect", "D", "black"),
                  dot("white", "NaN/Inf error", "o", "crimson"),
                  Line2D([], [], linestyle="", marker="x", color="0.55", label="eager's own error"),
                  Line2D([], [], color="darkorange", linestyle="-.", linewidth=1.0, label="rounding limit")]
    else:
        status = [dot("0.4", "pass"), dot("0.4", "fail", "D", "black"),
                  dot("white", "NaN/Inf error", "o", "crimson"),
                  Line2D([], [], color="0.35", linewidth=0.8, label="running max")]
    if has_first:
        status.append(Line2D([], [], color="crimson", linestyle="--", linewidth=1.0, label="first divergence"))
    axes[1].legend(handles=status, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)


def plot_diff(result: DiffResult, path, *, title: str | None = None) -> str:
    """Draw where the error grows along the model into ``path`` (.png or .svg).

    ``result`` should hold the passing pairs too (``diff(keep_passing=True)``, the
    default, or ``keep_all=True``): a plot of failures alone shows no growth.

    Args:
        result: what :func:`aoti_debug.diff` returned.
        path: the image file; its suffix picks the format.
        title: the figure's title (default: the two runs and the verdict).

    Returns:
        The path written.

    Raises:
        PlotError: matplotlib is missing, the suffix is neither .png nor .svg, or the
            file cannot be written.
    """
    fmt = plot_format(path)
    require_matplotlib()
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    points, phase = plot_points(result)
    ranked = ranked_groups(points)
    palette = _palette(ranked)
    has_other = any(p.group not in palette for p in points)
    rasterized = len(points) > _RASTERIZE_ABOVE

    # Text stays text in an SVG (searchable, and the kernel names can be copied).
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "aoti_debug"}):
        fig = Figure(figsize=(12, 7.5), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(2, 1, sharex=True)
        verdicts = any(p.ratio is not None for p in points)
        for ax, (metric, label) in zip(axes, _FP64_METRICS if verdicts else _METRICS):
            _draw_panel(ax, points, metric, label, palette, rasterized)
        if verdicts:
            _draw_verdicts(axes, points, result.rounding_factor)
        if not points:
            axes[0].text(0.5, 0.5, "no value was compared", transform=axes[0].transAxes, ha="center", va="center")
        _mark_first_divergence(axes, result, points)
        _legends(axes, ranked, palette, has_other, result.first_divergence is not None, verdicts)
        axes[1].set_xlabel("launch (run A)")
        axes[1].xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.suptitle(title or f"aoti-debug diff {_short(result.path_a)} vs {_short(result.path_b)} (reference)\n"
                              f"{result.verdict}: {result.count_line()}", fontsize=10)
        # As the figure's x label, constrained layout makes room for the footnote.
        fig.supxlabel(_footnote(result, phase), x=0.005, ha="left", fontsize=7, color="0.3")
        try:
            fig.savefig(os.fspath(path), format=fmt, dpi=120, metadata={"Date": None} if fmt == "svg" else None)
        except OSError as e:
            raise PlotError(f"cannot write {os.fspath(path)}: {e.strerror or e}") from None
    return os.fspath(path)
