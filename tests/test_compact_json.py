"""The JSON every search's log rows are written with (memlens.compact_json): compact, non-ASCII kept, the same
values as the json module, and the json module for what orjson refuses."""

from __future__ import annotations

import json

import pytest

from memlens.compact_json import dumps

STDLIB = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

CASES = [
    {"query": "Wie blockiert ein Rückruf? ünïcode — “quotes” \u2028 \\ \" / \n\t\x01", "active_wing": None, "k": 10,
     "weights_used": {"relevance": 1.0, "recency": 0.0, "salience": 0.5}},
    [["01M8B65DVX1XCBBS8HR2WR549G", 0.812345, 1e-06, 123456.000001, 0.0, 1.0, None] for _ in range(3)],
    {"latency_ms": {"embed": 3.512, "total": 5.001}, "cache_hit": False, "result_ids": ["a", "b"], "counts": {}},
    "entry-id-é",
]


@pytest.mark.parametrize("value", CASES)
def test_compact_text_with_the_values_of_the_json_module(value):
    text = dumps(value)
    assert isinstance(text, str) and json.loads(text) == json.loads(STDLIB(value))
    assert '": ' not in text and '", "' not in text  # compact: no space after a separator
    assert "\n" not in text and "\t" not in text and "\x01" not in text  # control characters escaped
    assert ("é" in text) == ("é" in STDLIB(value))  # non-ASCII kept as it is, not escaped


def test_what_orjson_refuses_goes_through_the_json_module():
    for value in ({"n": 2**70}, {1: "int key"}, [2**64]):
        assert dumps(value) == STDLIB(value)
