"""Provenance of a launch site: what its kernel was made from, in the user's terms.

Written once per site (not per record) into the run directory's ``sites.jsonl`` by both
runtimes, at the site's first launch; a record names its site (``Record.site``). The
reader merges the sites into ``run.json``'s view of each graph
(``RunInfo.graphs[label]["sites"]``).

A line of ``sites.jsonl``::

    {"graph": "graph0", "site": 7, "kernel": "cpp_fused_native_layer_norm_3",
     "nodes": ["var_mean_2", "sub_4", ...], "aten": ["aten.native_layer_norm.default"],
     "module": "model.transformer.h.1.ln_2", "source": ".../modeling_gpt2.py:412 in forward",
     "code": "hidden_states = self.ln_2(hidden_states)",
     "outputs": {"buf12": {"node": "add_9", "aten": "aten.native_layer_norm.default",
                           "module": "model.transformer.h.1.ln_2", "instance": "hidden_states_6",
                           "source": ".../modeling_gpt2.py:412 in forward"}}}

``nodes`` are the post-grad FX nodes fused into the kernel (graph order), ``aten`` their
original ATen ops (before decomposition), ``module`` the module path of the kernel's
first output (``nn_module_stack`` as the user writes it: without the compiled module's
own name, ``L['self']`` or the global it was called by; a free function transformers
lists there as ``apply_rotary_pos_emb (modeling_llama.py)`` after its caller), with
``module_raw`` Dynamo's own name where it differs, ``source`` and
``code`` the user's line (the innermost frame of ``stack_trace``), and ``outputs`` the FX
node each output value materialises, with ``instance``: the Dynamo graph node it was
decomposed from (the post-grad nodes of one ATen call share it).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

#: The file both runtimes append a line to at each site's first launch.
SITES_FILE = "sites.jsonl"

_FRAME_RE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_ITEM_RE = re.compile(r"\[['\"]?([^'\"\]]+)['\"]?\]")


#: Where a Dynamo source name starts: ``L['self']``, ``G['m']``, ``L['mod']`` (export: none).
_HEAD_RE = re.compile(r"""^(?:[LG]\[(?P<q>['"])(?P<name>[^'"]*)(?P=q)\]|(?P<self>self)(?=$|[.\[]))""")
#: How Dynamo names a module reached through a global import (``__import_`` + dotted name).
_IMPORT_PREFIX = "__import_"
#: A compiled module's own names, dropped in front of its module paths.
_SELF_NAMES = ("self",)


def _head(raw: str) -> tuple[str, str]:
    """(``self`` / a local's or global's name / "", the rest) of a Dynamo source name."""
    m = _HEAD_RE.match(raw)
    if m is None:
        return "", raw
    return (m["self"] or m["name"]), raw[m.end():]


def _dotted(path: str) -> str:
    """``._modules['ln_1']`` / ``[0]`` -> ``.ln_1`` / ``.0``, without leading or trailing dots."""
    path = path.replace("._modules", "")
    path = _ITEM_RE.sub(r".\1", path)
    return path.strip(".")


def _function(raw: str) -> tuple[str, str] | None:
    """(qualified name, file) of a free function that stands in ``nn_module_stack`` as a
    module (transformers wraps some, e.g. ``apply_rotary_pos_emb``):
    ``G['__import_transformers_dot_models_dot_llama_dot_modeling_llama'].apply_rotary_pos_emb``
    -> (``apply_rotary_pos_emb``, ``modeling_llama.py``); None for a module."""
    name, rest = _head(raw.strip())
    if not name and rest.startswith("G."):  # a path cleaned by an older writer
        name, _, rest = rest[2:].partition(".")
        rest = "." + rest
    if not name.startswith(_IMPORT_PREFIX):
        return None
    module = name[len(_IMPORT_PREFIX):].replace("_dot_", ".")
    qualname = _dotted(rest)
    return (qualname or module.rsplit(".", 1)[-1]), module.rsplit(".", 1)[-1] + ".py"


def module_path(raw: str, root: str = "") -> str:
    """A module path as users write it: ``L['self'].model.h[0]._modules['ln_1']`` ->
    ``model.h.0.ln_1`` (Dynamo's and export's spellings of ``nn_module_stack``).

    The compiled module's own name is dropped: ``L['self']``, and the local or global a
    compiled function called it by (``G['m'].model.layers.0`` -> ``model.layers.0``).
    ``root``: the raw name of that module where it is more than a name (``G['m'].module``,
    the outermost entry of the stack), dropped too."""
    path = raw.strip()
    if root and (path == root or path.startswith(root + ".") or path.startswith(root + "[")):
        return _dotted(path[len(root):])
    name, rest = _head(path)
    if name or path.startswith(("L[", "G[")):
        return _dotted(rest)
    return _dotted(re.sub(r"^L\.", "", path))


def _entries(meta: dict) -> list[str]:
    """The raw names of an FX node's ``nn_module_stack``, outermost first."""
    stack = (meta or {}).get("nn_module_stack") or {}
    out = []
    for v in (stack.values() if isinstance(stack, dict) else ()):
        out.append(str(v[0] if isinstance(v, (tuple, list)) and v else v))
    return out


def module_raw_of(meta: dict) -> str:
    """The innermost entry of an FX node's ``nn_module_stack`` as Dynamo or export wrote
    it (``G['m'].model.layers.0.input_layernorm``); "" without one."""
    entries = _entries(meta)
    return entries[-1] if entries else ""


def module_of(meta: dict) -> str:
    """The module path of an FX node, from its ``meta``: the innermost entry of its
    ``nn_module_stack`` as users write it (:func:`module_path`); "" without one.

    A free function in the stack (:func:`_function`) is named by its qualified name and
    file after the module that called it:
    ``model.layers.0.self_attn.apply_rotary_pos_emb (modeling_llama.py)``. Both sides of
    a comparison name their nodes through this function, so their paths agree."""
    entries = _entries(meta)
    if not entries:
        return ""
    modules = [e for e in entries if _function(e) is None]
    fn = _function(entries[-1])
    path = ""
    if modules:
        inner = modules[-1]
        name, _rest = _head(inner.strip())
        root = ""
        if name and name not in _SELF_NAMES:
            # A function compiled around a module: the outermost entry of that module's
            # local or global is the module it called (what torch.compile of the module,
            # or torch.export, names "").
            root = next((e.strip() for e in modules if _head(e.strip())[0] == name), "")
        path = module_path(inner, root)
    if fn is None:
        return path
    qualname, file = fn
    return f"{path + '.' if path else ''}{qualname} ({file})"


def source_line(stack_trace: str) -> tuple[str, str]:
    """(``file:line in func``, the code on that line) of the innermost frame of an FX
    node's ``stack_trace``; empty strings when it has none."""
    frames = list(_FRAME_RE.finditer(stack_trace or ""))
    if not frames:
        return "", ""
    m = frames[-1]
    rest = stack_trace[m.end():].splitlines()
    code = next((line.strip() for line in rest[1:] if line.strip() and set(line.strip()) != {"^"}), "") \
        if rest else ""
    if rest and rest[0].strip():
        code = code or rest[0].strip()
    return f"{m['file']}:{m['line']} in {m['func']}", code


#: Longest provenance line read (a wrapper of a huge graph fuses many nodes into a kernel).
MAX_SITE_LINE = 1 << 20


def parse_site_line(raw: bytes | str) -> tuple[str, int, "Provenance"]:
    """(graph, site, provenance) of one ``sites.jsonl`` line.

    Raises:
        ValueError: the line is not a site line (one phrase saying what is wrong).
    """
    if len(raw) > MAX_SITE_LINE:
        raise ValueError(f"longer than {MAX_SITE_LINE} bytes")
    try:
        d = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"not JSON ({type(e).__name__})") from None
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    graph, site, prov = d.get("graph"), d.get("site"), d.get("provenance")
    if type(graph) is not str or not graph:
        raise ValueError("graph must be a non-empty string")
    if type(site) is not int or site < 0:
        raise ValueError("site must be a non-negative integer")
    if not isinstance(prov, dict):
        raise ValueError("provenance must be an object")
    try:
        return graph, site, Provenance.from_dict(prov)
    except (TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"provenance is malformed ({type(e).__name__})") from None


def short_source(source: str) -> str:
    """``/long/path/modeling_gpt2.py:412 in forward`` -> ``modeling_gpt2.py:412 in forward``."""
    head, sep, tail = source.partition(":")
    return head.rsplit("/", 1)[-1] + sep + tail


def _strs(v: Any, what: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if not isinstance(v, list) or not all(type(x) is str for x in v):
        raise ValueError(f"{what} must be a list of strings")
    return tuple(v)


def _flag(v: Any, what: str) -> bool:
    if v is None:
        return False
    if type(v) is not bool:
        raise ValueError(f"{what} must be true or false")
    return v


def _str(v: Any, what: str) -> str:
    if v is None:
        return ""
    if type(v) is not str:
        raise ValueError(f"{what} must be a string")
    return v


@dataclasses.dataclass(frozen=True)
class ValueOrigin:
    """The FX node an output value materialises."""

    node: str
    aten: str = ""
    module: str = ""
    instance: str = ""
    source: str = ""
    """``file:line in func`` of the user's code."""
    code: str = ""
    """The code on that line."""
    inner: bool = False
    """A step inside the decomposition of ``instance`` (only nodes of the same instance use
    it), not the value that node returns: an eager reference has no such value."""
    module_raw: str = ""
    """The module as Dynamo or export named it (:func:`module_raw_of`), for tools."""

    def to_dict(self) -> dict:
        d = {"node": self.node, "aten": self.aten, "module": self.module, "instance": self.instance,
             "source": self.source}
        if self.module_raw:
            d["module_raw"] = self.module_raw
        if self.code:
            d["code"] = self.code
        if self.inner:
            d["inner"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ValueOrigin":
        if not isinstance(d, dict):
            raise ValueError("an output's origin must be an object")
        return cls(node=_str(d.get("node"), "node"), aten=_str(d.get("aten"), "aten"),
                   module=_str(d.get("module"), "module"), instance=_str(d.get("instance"), "instance"),
                   source=_str(d.get("source"), "source"), code=_str(d.get("code"), "code"),
                   inner=_flag(d.get("inner"), "inner"), module_raw=_str(d.get("module_raw"), "module_raw"))


def _lookup(pairs: tuple[tuple[str, ValueOrigin], ...], arg: str) -> ValueOrigin | None:
    return next((origin for name, origin in pairs if name == arg), None)


@dataclasses.dataclass(frozen=True)
class Provenance:
    """What one launch site was made from."""

    nodes: tuple[str, ...] = ()
    aten: tuple[str, ...] = ()
    module: str = ""
    source: str = ""
    """``file:line in func`` of the user's code."""
    code: str = ""
    """The code on that line."""
    outputs: tuple[tuple[str, ValueOrigin], ...] = ()
    inputs: tuple[tuple[str, ValueOrigin], ...] = ()
    """Graph inputs and weights the launch reads -> the fused node that uses them."""
    module_raw: str = ""
    """The module as Dynamo or export named it (:func:`module_raw_of`), for tools."""

    def output(self, arg: str) -> ValueOrigin | None:
        """The FX node output ``arg`` of this launch materialises."""
        return _lookup(self.outputs, arg)

    def input(self, arg: str) -> ValueOrigin | None:
        """The node that reads graph input / weight ``arg`` in this launch."""
        return _lookup(self.inputs, arg)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"nodes": list(self.nodes), "aten": list(self.aten), "module": self.module,
                             "source": self.source}
        if self.module_raw:
            d["module_raw"] = self.module_raw
        if self.code:
            d["code"] = self.code
        d["outputs"] = {name: origin.to_dict() for name, origin in self.outputs}
        if self.inputs:
            d["inputs"] = {name: origin.to_dict() for name, origin in self.inputs}
        return d

    def to_json(self) -> str:
        """Compact JSON, ASCII only and without a space (it is embedded in generated Python
        and C++ literals, and in the runtime's one-line ``site`` records of level names)."""
        text = json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=True, sort_keys=True)
        return text.replace(" ", "\\u0020")

    @classmethod
    def from_dict(cls, d: dict) -> "Provenance":
        """Raises ValueError (one phrase) where a field has the wrong type."""
        outputs = d.get("outputs")
        outputs = {} if outputs is None else outputs
        inputs = d.get("inputs")
        inputs = {} if inputs is None else inputs
        if not isinstance(outputs, dict) or not isinstance(inputs, dict):
            raise ValueError("outputs and inputs must be objects")
        return cls(nodes=_strs(d.get("nodes"), "nodes"), aten=_strs(d.get("aten"), "aten"),
                   module=_str(d.get("module"), "module"), module_raw=_str(d.get("module_raw"), "module_raw"),
                   source=_str(d.get("source"), "source"), code=_str(d.get("code"), "code"),
                   outputs=tuple(sorted((str(k), ValueOrigin.from_dict(v)) for k, v in outputs.items())),
                   inputs=tuple(sorted((str(k), ValueOrigin.from_dict(v)) for k, v in inputs.items())))

    def label(self) -> str:
        """One line for show/diff/locate: ``model.h.1.ln_2 @ modeling_gpt2.py:412 in forward``."""
        parts = [self.module or "", short_source(self.source) if self.source else ""]
        return " @ ".join(p for p in parts if p)
