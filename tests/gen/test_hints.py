"""tc_status_hint's table: every status code of the headers has words in gen/hints.toml or an
explicit "none", and the sticky and out-of-memory flags land where they should."""
import os
import re
import tomllib

import thincuda_gen
from conftest import ROOT


def _hints():
    with open(os.path.join(ROOT, "gen", "hints.toml"), "rb") as fh:
        return tomllib.load(fh)


def test_every_status_has_a_hint_or_an_explicit_none(rendered):
    files, problems = rendered
    assert not [p for p in problems if "hint" in p], problems
    names = re.findall(r'\{ TC_\w+, "(\w+)", ', files["tc_status.c"])
    assert len(names) > 100
    assert set(names) == set(_hints()["hint"])


def test_a_code_without_an_entry_is_reported_and_gets_none():
    hints = _hints()
    del hints["hint"]["CUDA_ERROR_LAUNCH_FAILED"]
    hints["hint"]["CUDA_ERROR_FROM_ANOTHER_RELEASE"] = "none"
    codes = [dict(name="CUDA_ERROR_LAUNCH_FAILED", string="An exception occurred. The "
                  "process must be terminated and relaunched."),
             dict(name="CUDA_ERROR_OUT_OF_MEMORY", string="Out of memory.")]
    warnings = thincuda_gen.status_hints(codes, hints, "12.6")
    assert any("CUDA_ERROR_LAUNCH_FAILED has no hint" in w for w in warnings)
    assert any("lack: CUDA_ERROR_FROM_ANOTHER_RELEASE" in w for w in warnings)
    assert codes[0]["hint_c"] == "NULL" and codes[0]["flags"] == "TC__STICKY"
    assert codes[1]["flags"] == "TC__OOM" and "--kv-fraction" in codes[1]["hint_c"]


def test_the_toolkit_version_is_filled_in_at_generation():
    codes = [dict(name="TC_ERR_DRIVER_TOO_OLD", string="old")]
    thincuda_gen.status_hints(codes, _hints(), "12.6")
    assert "at least CUDA 12.6 (installed: {driver})" in codes[0]["hint_c"]
