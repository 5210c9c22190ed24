"""The manifest writer's record encoding (format/writer.py): the text it keeps for the
parts of a record that repeat, and the JSON the runtime library gives for stats, write
the same keys and values as ``json.dumps``."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoti_debug.format import writer
from aoti_debug.format.protocol import record
from aoti_debug.format.writer import EncodedDict, encode_record

pytestmark = pytest.mark.quick  # compiles nothing: make check runs it

_FAST = dict(deadline=None, derandomize=True, database=None)

_text = st.text(st.characters(min_codepoint=1, max_codepoint=0x2FF), max_size=8)
_stat = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["inf", "-inf"]))


@st.composite
def records(draw):
    rec = record(seq=draw(st.integers(1, 10**9)), launch=draw(st.integers(0, 10**6)), graph=draw(_text),
                 wrapper=draw(st.sampled_from(["python", "cpp", "eager"])), kernel=draw(_text), op=draw(_text),
                 kernel_call=draw(st.integers(0, 99)), phase=draw(st.sampled_from(["before", "after"])),
                 arg=draw(_text), role="input", index=draw(st.integers(0, 9)),
                 expr=draw(st.one_of(st.none(), _text)), volatile=draw(st.one_of(st.none(), _text)),
                 site=draw(st.integers(-1, 9)))
    if draw(st.booleans()):
        rec["model_dtype"] = draw(_text)  # a key the eager reference adds before the metadata
    if draw(st.booleans()):
        shape = draw(st.lists(st.integers(0, 9), max_size=3))
        rec.update(kind="tensor", dtype=draw(st.sampled_from(["float32", "bfloat16"])), shape=shape,
                   stride=draw(st.lists(st.integers(0, 99), min_size=len(shape), max_size=len(shape))),
                   device="cpu", numel=draw(st.integers(0, 999)))
        stats = {k: draw(_stat) for k in ("min", "max", "mean", "std", "absmax")}
        stats.update(nan=draw(st.integers(0, 9)), inf=draw(st.integers(0, 9)))
        if draw(st.booleans()):
            encoded = EncodedDict(stats)
            encoded.json = json.dumps(stats, separators=(",", ":"))
            stats = encoded
        rec["stats"] = stats
        rec["checksum"] = draw(st.sampled_from(["0123456789abcdef", "0000000000000000"]))
        if draw(st.booleans()):
            rec["error"] = draw(_text)
    else:
        rec.update(kind="symint", value=draw(st.integers()), dtype="int")
    return rec


@settings(max_examples=500, **_FAST)
@given(rec=records())
def test_encoded_records_read_back_as_the_records(rec):
    text = encode_record(rec)
    assert json.loads(text) == rec
    assert text.isascii() and "\n" not in text
    if "model_dtype" not in rec and not any(isinstance(v, EncodedDict) for v in rec.values()):
        # in record order, the very same bytes (a key added before the metadata moves after it)
        assert text == json.dumps(rec, separators=(",", ":"))
    assert encode_record(rec) == text  # again, from the kept text


def test_an_encoded_dict_is_written_as_its_text():
    stats = EncodedDict({"min": 0.1, "max": 0.3})
    stats.json = '{"min":0.1,"max":0.30000000000000004}'  # what a writer would never produce from the dict
    rec = record(seq=1, launch=1, graph="g", wrapper="python", kernel="k", op="k", kernel_call=0, phase="after",
                 arg="buf0", role="output", index=0)
    rec.update(kind="tensor", dtype="float32", shape=[2], stride=[1], device="cpu", numel=2, stats=stats)
    assert encode_record(rec).endswith(',"stats":{"min":0.1,"max":0.30000000000000004}}')
    assert len(writer._texts) >= 1
