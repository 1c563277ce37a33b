"""src/model/unicode_classes.h (the classes through which the tokenizer's pre-tokenisation
regexes follow Hugging Face's tokenizers rather than PCRE2's older Unicode) is what
tools/unicode-classes writes today against the installed tokenizers and PCRE2."""
import os
import subprocess

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_unicode_classes_are_current():
    tokenizers = pytest.importorskip("tokenizers")
    r = subprocess.run([os.path.join(ROOT, "tools", "unicode-classes")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(ROOT, "src", "model", "unicode_classes.h")) as f:
        committed = f.read()
    first = committed.splitlines()[0]
    if f"tokenizers {tokenizers.__version__}," not in first or "PCRE2 10.42" not in r.stdout:
        pytest.skip(f"made with other versions ({first}); this machine: tokenizers "
                    f"{tokenizers.__version__}, {r.stdout.splitlines()[0]}")
    assert r.stdout == committed, "rerun tools/unicode-classes > src/model/unicode_classes.h"
