"""The README's overhead table, built from benchmark runs saved as JSON.

    python benchmarks/readme_table.py                      # print it from benchmarks/results/*.json
    python benchmarks/readme_table.py --write README.md    # replace the table between its markers
    python benchmarks/readme_table.py --check README.md    # exit 1 when README.md's table is not this

Each file is one run of ``overhead.py --json`` or ``overhead_cpu.py --json`` (the GPU's
rows, the CPU's). A cell is a median step as a ratio to the uninstrumented compile of the
same model, wrapper and mode *in the same run*; "steady" is the same steps back to back
(records written while the next steps run; ``overhead.py`` only). A save cell also says
how far it is from the disk's write rate measured in its run. Under the table: each run's
command, machine, torch, commit and date. Nothing here is typed by hand.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import saved_runs  # noqa: E402

DEFAULT_GLOB = os.path.join(HERE, "results", "*.json")
BEGIN = "<!-- overhead-table: made by benchmarks/readme_table.py from benchmarks/results/; do not edit -->"
END = "<!-- overhead-table: end -->"
#: (column, level, back to back)
COLUMNS = (("names", "names", False), ("stats", "stats", False), ("stats, steady", "stats", True),
           ("print", "print", False), ("save", "save", False), ("built-in print", "built-in print", False),
           ("built-in save", "built-in save", False))
_MODELS = {"resnet18": "ResNet-18 b32, channels_last", "transformer": "transformer d=1024, 4 blocks, 8×256",
           "gpt2": "GPT-2 2 layers (transformers)"}
_WRAPPERS = {"python": "Python", "cpp": "`cpp_wrapper=True`", "aoti": "AOTInductor"}
_ORDER = {"python": 0, "cpp": 1, "aoti": 2}


def _model(doc: dict, key: str) -> str:
    name = _MODELS.get(key, key)
    preset = doc.get("preset")
    return name if preset in (None, "full") else f"{key} ({preset})"


def _wrapper(wrapper: str, mode: str) -> str:
    name = _WRAPPERS.get(wrapper, wrapper)
    return name + (", CUDA graphs" if mode == "reduce-overhead" else "" if mode == "default" else f", {mode}")


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def _cell(r: dict | None, base: dict | None, steady: bool, disk: float | None) -> str:
    if r is None or base is None:
        return "–"
    if "base_step_s" in r:  # timed in turn with a base of its own process (overhead.py --paired)
        base = {"step_s": r["base_step_s"], "steady_s": r.get("base_steady_s")}
    x = _ratio(r.get("steady_s"), base.get("steady_s")) if steady else _ratio(r["step_s"], base["step_s"])
    if x is None:
        return "–"
    text = f"{x:,.0f}" if x >= 100 else f"{x:.2f}"
    if r["level"] in ("save", "built-in save") and not steady and disk and (r.get("bytes_per_step") or 0) > 1e6:
        text += f" ({r['step_s'] / (r['bytes_per_step'] / disk):.2f}× the disk floor)"
    if "CUDA graphs skipped" in (r.get("notes") or ""):
        text += " (no CUDA graph)"
    return text


def table(docs: list[tuple[str, dict]]) -> str:
    """The markdown of the table and its runs, between the markers."""
    lines = [BEGIN, "| machine [run] | model | wrapper | " + " | ".join(c[0] for c in COLUMNS) + " |",
             "|---|---|---|" + "---:|" * len(COLUMNS)]
    runs = []
    for n, (path, doc) in enumerate(docs, 1):
        groups: dict[tuple[str, str, str], dict[str, dict]] = {}
        for r in doc["rows"]:
            groups.setdefault((r["model"], r["wrapper"], r["mode"]), {})[r["level"]] = r
        machine = f"{doc['machine'].split(',')[0]} [{n}]"
        for (model, wrapper, mode), by_level in sorted(
                groups.items(), key=lambda kv: (kv[0][0], _ORDER.get(kv[0][1], 9), kv[0][2] != "default")):
            base = by_level.get("base")
            if base is None or len(by_level) == 1:
                continue
            cells = [_cell(by_level.get(level), base, steady, doc.get("disk_bytes_per_s"))
                     for _col, level, steady in COLUMNS]
            lines.append(f"| {machine} | {_model(doc, model)} | {_wrapper(wrapper, mode)} | " + " | ".join(cells) + " |")
        where = ", ".join(filter(None, [doc["machine"], f"torch {doc['torch']}",
                                        f"commit {doc['commit']}" if doc.get("commit") else "", doc.get("date", "")]))
        skipped = f"; not run: {'; '.join(doc['not_run'])}" if doc.get("not_run") else ""
        runs.append(f"{n}. `{doc['command']}` ({where}; `{os.path.relpath(path, os.path.dirname(HERE))}`{skipped})")
    return "\n".join(lines + ["", *runs, END])


def load(paths: list[str]) -> list[tuple[str, dict]]:
    docs = [(p, saved_runs.read(p)) for p in paths]
    # GPU runs first, by model, then Python before cpp_wrapper before AOTInductor.
    return sorted(docs, key=lambda pd: (pd[1]["tool"] != "overhead.py", pd[1].get("model_key", ""),
                                        min((_ORDER.get(r["wrapper"], 9) for r in pd[1]["rows"]), default=9),
                                        pd[1].get("date", ""), pd[0]))


def _replace(text: str, new: str, path: str) -> str:
    at, end = text.find(BEGIN), text.find(END)
    if at < 0 or end < at:
        raise ValueError(f"{path}: no table markers ({BEGIN!r} ... {END!r}); add them where the table goes")
    return text[:at] + new + text[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help=f"runs saved with --json (default: {os.path.relpath(DEFAULT_GLOB)})")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="README", help="replace the table between its markers in this file")
    group.add_argument("--check", metavar="README", help="exit 1 when this file's table is not the one made now")
    args = ap.parse_args(argv)
    paths = args.files or sorted(glob.glob(DEFAULT_GLOB))
    try:
        if not paths:
            raise ValueError(f"no runs: give files saved with --json, or put them in {os.path.dirname(DEFAULT_GLOB)}")
        made = table(load(paths))
        target = args.write or args.check
        if target is None:
            print(made)
            return 0
        with open(target, encoding="utf-8") as f:
            text = f.read()
        new = _replace(text, made, target)
    except (OSError, ValueError) as e:
        print(f"readme_table: {e}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print(f"readme_table: {args.check}'s table is not the one {len(paths)} saved runs make; "
                  f"run: python benchmarks/readme_table.py --write {args.check}", file=sys.stderr)
            return 1
        return 0
    with open(args.write, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
