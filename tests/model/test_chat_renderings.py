"""data/chat_renderings.json (checked against our renderer by test_chat_families.c) is what
transformers' apply_chat_template renders today: each case rendered again from its template
file (transformers without PyTorch suffices)."""
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_chat_renderings as M  # noqa: E402

pytest.importorskip("transformers")


def test_recorded_renderings_are_transformers_own():
    with open(os.path.join(M.DATA, "chat_renderings.json")) as f:
        recorded = json.load(f)["cases"]
    assert len(recorded) == len(M.cases())
    for c in recorded:
        got = M.render(c["family"], c["messages"], c["add_generation_prompt"], c.get("tools"))
        assert got == c["expected"], (c["family"], c["name"])
