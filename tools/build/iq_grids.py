#!/usr/bin/env python3
"""Write kernels/iq_grids.h: the lookup tables of GGUF's IQ types (format data) from gguf-py's
quants.py (PyPI's `gguf`, llama.cpp's Python package), for src/model/quant.c and kernels/iq.cu.

Each grid row is one uint16: its elements' indices into the type's value map, element j in
bits [b j, b j + b) (b = 2 for rows of 8 elements, 4 for rows of 4). Run by hand when the
package's tables change; tests/model/test_dequant.py checks that the committed header is what
this writes. Usage: iq_grids.py [OUTPUT] (default kernels/iq_grids.h)
"""
import importlib.metadata
import os
import sys

import numpy as np
from gguf import quants

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# (C name, gguf-py class): every grid, in the order of the types' ggml ids.
GRIDS = [
    ("tc_iq2xxs_grid", quants.IQ2_XXS),
    ("tc_iq2xs_grid", quants.IQ2_XS),
    ("tc_iq3xxs_grid", quants.IQ3_XXS),
    ("tc_iq1s_grid", quants.IQ1_S),
    ("tc_iq3s_grid", quants.IQ3_S),
    ("tc_iq2s_grid", quants.IQ2_S),
]


def packed(cls):
    """The grid's rows as uint16 words of value-map indices, and the value map."""
    cls.init_grid()
    rows, n = cls.grid_shape
    values = [int(v) for v in cls.grid_map]
    bits = 16 // n
    assert n in (4, 8) and len(values) <= 1 << bits, cls.__name__
    grid = cls.grid.reshape(rows, n)
    words = []
    for row in grid:
        w = 0
        for j, v in enumerate(row):
            w |= values.index(int(v)) << (bits * j)
        words.append(w)
    return words, values


def c_array(decl, items, per_line, fmt):
    lines = ["TC_IQ_TABLE %s = {" % decl]
    for i in range(0, len(items), per_line):
        lines.append("    " + ", ".join(fmt % v for v in items[i:i + per_line]) + ",")
    lines.append("};")
    return lines


def render():
    version = importlib.metadata.version("gguf")
    out = [
        "/* Do not edit: written by tools/build/iq_grids.py from gguf-py %s (PyPI's gguf). */"
        % version,
        "/* The lookup tables of GGUF's IQ types (llama.cpp's ggml-common.h names them iq2xxs_grid,",
        " * ..., ksigns_iq2xs and kvalues_iq4nl): each grid row one uint16 of indices into its value",
        " * map (element j in bits [b j, b j + b), b = 2 for rows of 8 and 4 for rows of 4). For C",
        " * (src/model/quant.c) and CUDA (kernels/iq.cu, in global memory). */",
        "#ifndef TC_IQ_GRIDS_H",
        "#define TC_IQ_GRIDS_H",
        "#include <stdint.h>",
        "",
        "#ifdef __CUDACC__",
        "#define TC_IQ_TABLE static __device__ const",
        "#else",
        "#define TC_IQ_TABLE static const",
        "#endif",
        "",
    ]
    values = {}
    for name, cls in GRIDS:
        words, values[name] = packed(cls)
        rows, n = cls.grid_shape
        out.append("/* %s (%s): %d rows of %d elements. */" % (name, cls.__name__, rows, n))
        out += c_array("uint16_t %s[%d]" % (name, rows), words, 12, "0x%04x")
        out.append("")
    two = values["tc_iq2xxs_grid"]
    assert values["tc_iq2xs_grid"] == two and values["tc_iq2s_grid"] == two
    maps = [("uint8_t tc_iq2_values", two, "the IQ2 grids"),
            ("uint8_t tc_iq3xxs_values", values["tc_iq3xxs_grid"], "tc_iq3xxs_grid"),
            ("uint8_t tc_iq3s_values", values["tc_iq3s_grid"], "tc_iq3s_grid"),
            ("int8_t tc_iq1s_values", values["tc_iq1s_grid"], "tc_iq1s_grid")]
    for decl, v, what in maps:
        out.append("/* The value each index of %s stands for. */" % what)
        out += c_array("%s[%d]" % (decl, len(v)), v, 16, "%d")
        out.append("")
    ksigns = [int(v) for v in np.frombuffer(quants.IQ2_XXS.ksigns, dtype=np.uint8)]
    assert ksigns == [i | (bin(i).count("1") & 1) << 7 for i in range(128)]
    out.append("/* Eight signs (bit j set: element j negative) from 7 bits, the eighth making the")
    out.append(" * count even. */")
    out += c_array("uint8_t tc_iq_ksigns[128]", ksigns, 16, "0x%02x")
    out.append("")
    out.append("/* IQ4_NL's and IQ4_XS's 16 non-uniform values. */")
    out += c_array("int8_t tc_iq4nl_values[16]", [int(v) for v in quants.IQ4_NL.kvalues], 16, "%d")
    out += ["", "#endif /* TC_IQ_GRIDS_H */", ""]
    return "\n".join(out)


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "kernels", "iq_grids.h")
    with open(path, "w") as fh:
        fh.write(render())
