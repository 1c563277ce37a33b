"""GPTQ, AWQ and compressed-tensors folders (tests/model/quant_hf.py) on the CPU backend: every
matrix as loaded (tools/hfweight, our repacking into q4_0 / q4_1 / q4_1_g64 / q4_1_g128 / q8_0
blocks or f32, dequantised) equals the reference unpacking of quant_hf.py bit for bit, the q4_1
types with zero points within the f16 rounding of their m = -s z; compressed-tensors' parts as quant_hf.py packs them equal those the
compressed-tensors package packs, and our loading of the package's parts and configuration
equals its decompression (recorded by make_ct_reference.py in data/ct_reference.*), and GPTQ's
and AWQ's as AutoGPTQ, GPTQModel and AutoAWQ pack and unpack them (make_gptq_awq_reference.py); the logits
of each folder (tools/logits) equal those of the same model dequantised by the reference into an
ordinary f32 folder; malformed folders and unsupported configurations are one clear error each;
thincuda info names the quantisation."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("safetensors")
from safetensors.numpy import load_file, save_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import quant_hf as Q  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
TOOLS = os.path.join(HERE, "..", "..", BUILD, "tools")
EXE = os.path.join(HERE, "..", "..", BUILD, "src", "cli", "thincuda")


def tool(name):
    p = os.path.join(TOOLS, name)
    if not os.path.exists(p):
        pytest.skip(f"{p} is not built")
    return p


def loaded(folder, name, tmp):
    out = os.path.join(tmp, "w.bin")
    r = subprocess.run([tool("hfweight"), folder, name, out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip(), np.fromfile(out, dtype=np.float32)


@pytest.mark.parametrize("case", list(Q.CASES))
def test_weights_equal_the_reference_unpacking(case, tmp_path):
    weights_equal_the_reference(case, "tiny", tmp_path)


@pytest.mark.parametrize("case", ["gptq-asym4-col", "gptq-sym4-col", "awq-g128", "gptq-desc-g128"])
def test_odd_counts_of_128_blocks_equal_the_reference(case, tmp_path):
    """Rows of 3 and 5 q4_1_g128 blocks (384 and 640 inputs)."""
    weights_equal_the_reference(case, "tiny-odd", tmp_path)


def weights_equal_the_reference(case, shape, tmp_path):
    d = str(tmp_path / "q")
    modules = Q.write(d, case, shape, seed=3)
    want_type = Q.CASES[case][6]
    for module, parts in modules.items():
        layer = module.split(".")[2]
        held, got = loaded(d, f"blk.{layer}.{Q.GGUF[module.split('.', 3)[3]]}.weight", str(tmp_path))
        ref = Q.unpack(case, parts).reshape(-1)
        assert held == want_type, (module, held)
        assert np.isfinite(got).all() and np.isfinite(ref).all()
        assert np.abs(ref).max() > 0
        # (Symmetric groups held as q4_1_g128 too: m = -8 s, exact.)
        if held not in Q41 or Q.CASES[case][3]:
            assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), module
            continue
        # q4_1 holds d = s and m = -s z in f16: |m + s z| <= 2^-11 |s z| (normal f16) or
        # 2^-25 (subnormal), and s q + m rounds once in f32.
        sc, _, z = elements(case, parts)
        sz = np.abs(sc * z).reshape(-1)
        bound = np.maximum(sz * 2.0 ** -11, 2.0 ** -25) + np.abs(ref) * 2.0 ** -23
        assert (np.abs(got - ref) <= bound).all(), module


Q41 = ("q4_1", "q4_1_g64", "q4_1_g128")


def elements(case, parts):
    """Each element's scale, q and z [out, in], through the reference unpacking."""
    method, _, group, _, _, _, _ = Q.CASES[case]
    sn, qn = ("weight_scale", "weight_packed") if method == "ct" else ("scales", "qweight")
    ones = {**parts, sn: np.ones_like(parts[sn])}
    q_minus_z = Q.unpack(case, ones)
    z = -Q.unpack(case, {**ones, qn: np.zeros_like(parts[qn])})
    k = q_minus_z.shape[1]
    g = (parts["g_idx"] if method == "gptq" else parts["weight_g_idx"] if "weight_g_idx" in parts
         else np.arange(k) // group if group > 0 else 0 * np.arange(k))
    s = parts[sn].astype(np.float32)
    return (s[:, g] if method == "ct" else s[g].T), q_minus_z + z, z


@pytest.mark.parametrize("case", [c for c in Q.CASES if Q.CASES[c][6] in Q41])
def test_q4_1_blocks_hold_the_rounded_minimum(case, tmp_path):
    """Bit for bit: each q4_1 (and q4_1_g64, q4_1_g128: groups of 64, of 128 and more, one d and
    m for 64 or 128 inputs) weight is s q + f16(-(s z)) in f32, s, q and z from the reference."""
    d = str(tmp_path / "q")
    modules = Q.write(d, case, seed=4)
    for module, parts in modules.items():
        layer = module.split(".")[2]
        _, got = loaded(d, f"blk.{layer}.{Q.GGUF[module.split('.', 3)[3]]}.weight", str(tmp_path))
        sc, q, z = elements(case, parts)
        m = (-(sc * z)).astype(np.float16).astype(np.float32)
        want = (sc * q + m).astype(np.float32).reshape(-1)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), module


@pytest.fixture(scope="module")
def ids(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("ids") / "ids")
    np.random.default_rng(1).integers(0, 256, 10).astype(np.int32).tofile(p)
    return p


def logits(folder, ids, tmp, env=None):
    out = os.path.join(tmp, os.path.basename(folder) + ".logits")
    r = subprocess.run([tool("logits"), folder, "cpu", "f32", "6", ids, out], capture_output=True,
                       text=True, env=dict(os.environ, **(env or {})))
    return r, (np.fromfile(out, dtype=np.float32).reshape(-1, 256) if r.returncode == 0 else None)


@pytest.mark.parametrize("case", list(Q.CASES))
def test_folder_runs_as_its_dequantised_f32_copy(case, ids, tmp_path):
    q, f = str(tmp_path / "q"), str(tmp_path / "f")
    # Scales of 7 significant bits make s z exact in f16, so q4_1 is exact too.
    Q.write(q, case, coarse=True, reference=f, seed=5)
    rq, lq = logits(q, ids, str(tmp_path), env={"THINCUDA_LOG": "info"})
    rf, lf = logits(f, ids, str(tmp_path))
    assert rq.returncode == 0, rq.stderr
    assert rf.returncode == 0, rf.stderr
    lines = [x for x in rq.stderr.splitlines() if "dequantised to f32 on the host at load" in x]
    assert len(lines) == (1 if Q.CASES[case][6] == "f32" else 0), rq.stderr
    ordered = [x for x in rq.stderr.splitlines() if "in activation order (desc_act)" in x]
    assert len(ordered) == (1 if Q.CASES[case][4] else 0), rq.stderr
    assert np.isfinite(lq).all() and np.isfinite(lf).all()
    rel = np.linalg.norm(lq - lf) / np.linalg.norm(lf)
    assert rel < 1e-5, rel
    assert (lq.argmax(1) == lf.argmax(1)).all()


def test_act_order_groups_of_other_sizes_stay_f32(ids, tmp_path):
    """A g_idx whose groups do not each hold a multiple of 32 inputs cannot be sorted into whole
    blocks: that matrix is dequantised to f32 (the others keep their blocks in group order),
    still equal to the reference unpacking bit for bit, and the folder still runs as its
    dequantised copy."""
    d, f = str(tmp_path / "q"), str(tmp_path / "f")
    modules = Q.write(d, "gptq-desc", coarse=True, seed=7)
    g = modules["model.layers.0.self_attn.q_proj"]["g_idx"].copy()
    g[int(np.flatnonzero(g == 1)[0])] = 0  # group 0 takes 33 inputs, group 1 keeps 31
    edit(d, lambda t: t.update({L0 + "g_idx": g}))
    held, got = loaded(d, "blk.0.attn_q.weight", str(tmp_path))
    assert held == "f32"
    ref = Q.unpack("gptq-desc", {**modules["model.layers.0.self_attn.q_proj"], "g_idx": g})
    assert np.array_equal(got.view(np.uint32), ref.reshape(-1).view(np.uint32))
    assert loaded(d, "blk.0.attn_k.weight", str(tmp_path))[0] == "q4_0"
    r, lq = logits(d, ids, str(tmp_path), env={"THINCUDA_LOG": "info"})
    assert r.returncode == 0, r.stderr
    assert "1 of" in r.stderr and "act-order: g_idx groups that are not whole 32-element blocks" in r.stderr
    os.makedirs(f)
    plain = {k: v for k, v in load_file(os.path.join(d, "model.safetensors")).items()
             if not any(k.endswith("." + p) for p in ("qweight", "qzeros", "scales", "g_idx"))}
    for module, parts in modules.items():
        parts = {**parts, "g_idx": g} if module.endswith("0.self_attn.q_proj") else parts
        plain[module + ".weight"] = Q.unpack("gptq-desc", parts)
    save_file({k: v.astype(np.float32) for k, v in plain.items()}, os.path.join(f, "model.safetensors"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg.pop("quantization_config")
    json.dump(cfg, open(os.path.join(f, "config.json"), "w"))
    rf, lf = logits(f, ids, str(tmp_path))
    assert rf.returncode == 0, rf.stderr
    assert np.isfinite(lq).all()
    assert np.linalg.norm(lq - lf) / np.linalg.norm(lf) < 1e-5


# (the package's recorded reference has no weight_g_idx case: compressed-tensors 0.20.0's
# compressor carries no g_idx, its compress and decompress ignore weight_g_idx; actorder group's
# unpacking is checked against quant_hf.py's reference like GPTQ's g_idx, and GPTQ's g_idx
# against AutoGPTQ's below)
CT_CASES = [c for c in Q.CASES if Q.CASES[c][0] == "ct" and not Q.CASES[c][4]]
CT_REF = os.path.join(HERE, "data", "ct_reference")


@pytest.mark.parametrize("case", CT_CASES)
def test_ct_packing_equals_the_compressed_tensors_package(case):
    """Our packer (which writes the test folders) against the package's compress, bit for bit."""
    ref = load_file(CT_REF + ".safetensors")
    _, bits, _, sym, _, fmt, _ = Q.CASES[case]
    q, z, s, _ = Q.reference_matrix(case)
    parts = Q.pack_ct(q, z, s, bits, sym, fmt)
    names = {k.split(".", 1)[1] for k in ref if k.startswith(case + ".")} - {"weight"}
    assert names == set(parts), (names, set(parts))
    for name, got in parts.items():
        want = ref[f"{case}.{name}"]
        assert got.shape == want.shape, name
        if name == "weight_scale":  # recorded as f32 values
            got = got.astype(np.float32)
        assert got.dtype == want.dtype and np.array_equal(got, want), name


@pytest.mark.parametrize("case", CT_CASES)
def test_ct_loading_equals_the_compressed_tensors_decompression(case, tmp_path):
    """A folder whose layer-0 k_proj holds the parts the package packed, under the
    quantization_config the package dumps: loaded and dequantised, it is the package's
    decompress (with f32 scales) bit for bit, whatever type it is held in."""
    ref = load_file(CT_REF + ".safetensors")
    config = json.load(open(CT_REF + ".json"))["quantization_config"][case]
    fmt = Q.CASES[case][5]
    parts = {k.split(".", 1)[1]: v for k, v in ref.items() if k.startswith(case + ".")}
    want = parts.pop("weight")
    if fmt == "f16":
        parts["weight_scale"] = parts["weight_scale"].astype(np.float16)
    assert np.abs(want).max() > 0
    assert_k_proj_loads_to(case, parts, want, tmp_path, config)


def assert_k_proj_loads_to(case, parts, want, tmp_path, config=None):
    """A folder of `case` whose layer-0 k_proj holds `parts` (under quantization_config
    `config`, or the case's) holds it in the case's type and dequantises it to `want`, bit for
    bit."""
    d = str(tmp_path / "q")
    Q.write(d, case, seed=8, replace={"model.layers.0.self_attn.k_proj": parts},
            quant_config_=config)
    held, got = loaded(d, "blk.0.attn_k.weight", str(tmp_path))
    assert held == Q.CASES[case][6], held
    assert np.array_equal(got.view(np.uint32), want.reshape(-1).view(np.uint32))


# GPTQ and AWQ matrices as AutoGPTQ 0.7.1 (v1), GPTQModel 7.7.0 (gptq_v2) and AutoAWQ 0.2.9 pack
# and unpack them, recorded by make_gptq_awq_reference.py
PKG_REF = os.path.join(HERE, "data", "gptq_awq_reference")
PKG_CASES = sorted(json.load(open(PKG_REF + ".json"))["packer"])


def package_parts(case):
    """The package's parts of `case`'s reference matrix, and the weight it unpacks from them."""
    parts = {k.split(".", 1)[1]: v for k, v in load_file(PKG_REF + ".safetensors").items()
             if k.startswith(case + ".")}
    return parts, parts.pop("weight")


@pytest.mark.parametrize("case", PKG_CASES)
def test_gptq_awq_packing_equals_the_packages(case):
    """Our packer (which writes the test folders) against the package's, and our reference
    unpacking of the package's parts against the package's own, bit for bit."""
    parts, weight = package_parts(case)
    method, bits, fmt = Q.CASES[case][0], Q.CASES[case][1], Q.CASES[case][5]
    q, z, s, g_idx = Q.reference_matrix(case)
    qweight, qzeros = Q.pack_awq(q, z) if method == "awq" else Q.pack_gptq(q, z, bits, fmt == "gptq")
    ours = {"qweight": qweight, "qzeros": qzeros, "scales": s.astype(np.float16)}
    if method == "gptq":
        ours["g_idx"] = g_idx
    assert set(ours) == set(parts)
    for name, got in ours.items():
        want = parts[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want), name
    assert np.abs(weight).max() > 0
    assert np.array_equal(Q.unpack(case, parts).view(np.uint32), weight.view(np.uint32))


@pytest.mark.parametrize("case", PKG_CASES)
def test_gptq_awq_loading_equals_the_packages_unpacking(case, tmp_path):
    """A folder whose layer-0 k_proj holds the parts the package packed: loaded (into its block
    type, act-order blocks in group order) and dequantised, it is the package's unpacking bit
    for bit."""
    parts, want = package_parts(case)
    assert_k_proj_loads_to(case, parts, want, tmp_path)


@pytest.mark.parametrize("actorder", ["weight", "static"])
def test_ct_actorder_weight_loads_as_without_it(actorder, tmp_path):
    """actorder weight (alias static) changes only GPTQ's visiting order, not the file."""
    d = str(tmp_path / "q")
    modules = Q.write(d, "ct-w4a16", seed=9)
    edit(d, quant=lambda c: ctw(c).update(actorder=actorder))
    held, got = loaded(d, "blk.1.ffn_up.weight", str(tmp_path))
    want = Q.unpack("ct-w4a16", modules["model.layers.1.mlp.up_proj"]).reshape(-1)
    assert held == "q4_1_g128" and np.array_equal(got.view(np.uint32), want.view(np.uint32))


def edit(folder, fn=None, quant=None):
    """Rewrite folder's tensors through fn(dict) and/or its quantization_config through quant."""
    if fn:
        p = os.path.join(folder, "model.safetensors")
        t = dict(load_file(p))
        fn(t)
        save_file(t, p)
    if quant:
        p = os.path.join(folder, "config.json")
        c = json.load(open(p))
        quant(c)
        json.dump(c, open(p, "w"))


L0 = "model.layers.0.self_attn.q_proj."
K0 = "model.layers.0.self_attn.k_proj."


@pytest.mark.parametrize("case,scale,want", [("gptq-asym4-v2", 8192, "f32"), ("gptq-sym4-col", 8192, "q4_0"),
                                            ("gptq-sym4-col", 8188, "q4_1_g128")])
def test_a_minimum_beyond_f16_takes_another_type(case, scale, want, tmp_path):
    """q4_1's m = -s z must stay finite in f16: layer 0's q_proj with one scale of 8192 (and
    that output's zero 15 where it has zero points) is held as f32 with zero points and as q4_0
    without (z = 8: -8 s = -65536, beyond f16's 65504), with 8188 (-65504) as q4_1_g128, equal
    to the reference unpacking bit for bit; k_proj keeps q4_1_g128."""
    d = str(tmp_path / "q")
    modules = Q.write(d, case, seed=5)
    parts = dict(modules["model.layers.0.self_attn.q_proj"])
    parts["scales"] = parts["scales"].copy()
    parts["scales"][0, 0] = scale
    if not Q.CASES[case][3]:
        qz = parts["qzeros"].view(np.uint32).copy()
        qz[0, 0] = (qz[0, 0] & ~np.uint32(15)) | np.uint32(15)  # gptq_v2: z as stored
        parts["qzeros"] = qz.view(np.int32)
    edit(d, lambda t: t.update({L0 + "scales": parts["scales"], L0 + "qzeros": parts["qzeros"]}))
    held, got = loaded(d, "blk.0.attn_q.weight", str(tmp_path))
    assert held == want
    ref = Q.unpack(case, parts).reshape(-1)
    assert np.isfinite(ref).all() and np.abs(ref).max() >= 8192  # the edited output is there
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    assert loaded(d, "blk.0.attn_k.weight", str(tmp_path))[0] == "q4_1_g128"


def ct(c):
    return c["quantization_config"]


def ctg(c):
    return ct(c)["config_groups"]["group_0"]


def ctw(c):
    return ctg(c)["weights"]


BAD = {
    "missing qzeros": ("gptq-sym4", lambda t: t.pop(L0 + "qzeros"), None,
                       "model.layers.0.self_attn.q_proj has no qzeros"),
    "missing scales": ("awq", lambda t: t.pop(L0 + "scales"), None,
                       "model.layers.0.self_attn.q_proj has no scales"),
    "scales of the wrong shape": ("gptq-asym4", lambda t: t.update({L0 + "scales": t[L0 + "scales"][:2]}),
                                  None, "q_proj.scales has shape [2, 128], want [4, 128]"),
    "qzeros of the wrong shape": ("awq", lambda t: t.update({L0 + "qzeros": t[L0 + "qzeros"][:, :8]}),
                                  None, "q_proj.qzeros has shape [2, 8], want [2, 16]"),
    "scales not f16": ("gptq-sym4", lambda t: t.update({L0 + "scales": t[L0 + "scales"].astype(np.float32)}),
                       None, "q_proj.scales is f32 with 2 dimensions, want f16"),
    "g_idx out of range": ("gptq-desc", lambda t: t[L0 + "g_idx"].__setitem__(5, 99), None,
                           "q_proj.g_idx[5] is 99, outside 0..3"),
    "bits 3": ("gptq-sym4", None, lambda c: c["quantization_config"].update(bits=3),
               "quantization_config.bits is 3, which is not supported (GPTQ: 4 or 8)"),
    "unknown method": ("gptq-sym4", None, lambda c: c["quantization_config"].update(quant_method="bitsandbytes"),
                       "quantization_config.quant_method is \"bitsandbytes\", which is not supported (gptq, "
                       "awq or compressed-tensors)"),
    "compressed-tensors naive-quantized": ("ct-w4a16", None, lambda c: ct(c).update(format="naive-quantized"),
                                           "quantization_config.format is \"naive-quantized\""),
    "compressed-tensors float-quantized": ("ct-w4a16", None, lambda c: ct(c).update(format="float-quantized"),
                                           "quantization_config.format is \"float-quantized\""),
    "compressed-tensors marlin-24": ("ct-w4a16", None, lambda c: ct(c).update(format="marlin-24"),
                                     "quantization_config.format is \"marlin-24\""),
    "compressed-tensors group format": ("ct-w4a16", None, lambda c: ctg(c).update(format="int-quantized"),
                                        "quantization_config.config_groups.group_0.format is \"int-quantized\""),
    "compressed-tensors activations": ("ct-w4a16", None,
                                       lambda c: ctg(c).update(input_activations={"num_bits": 8, "type": "int"}),
                                       "quantization_config.config_groups.group_0.input_activations is {"),
    "compressed-tensors 2 bits": ("ct-w4a16", None, lambda c: ctw(c).update(num_bits=2),
                                  "quantization_config.config_groups.group_0.weights.num_bits is 2, which is "
                                  "not supported (compressed-tensors: 4 or 8)"),
    "compressed-tensors float weights": ("ct-w4a16", None, lambda c: ctw(c).update(type="float"),
                                         "config_groups.group_0.weights.type is \"float\""),
    "compressed-tensors actorder group without weight_g_idx": (
        "ct-w4a16-group-order", lambda t: t.pop(K0 + "weight_g_idx"), None,
        "model.layers.0.self_attn.k_proj has no weight_g_idx, which actorder group needs"),
    "compressed-tensors weight_g_idx out of range": (
        "ct-w4a16-group-order", lambda t: t[K0 + "weight_g_idx"].__setitem__(3, 2), None,
        "k_proj.weight_g_idx[3] is 2, outside 0..1"),
    "compressed-tensors unknown actorder": ("ct-w4a16", None, lambda c: ctw(c).update(actorder="random"),
                                            "config_groups.group_0.weights.actorder is \"random\""),
    "compressed-tensors tensor strategy": ("ct-w4a16", None, lambda c: ctw(c).update(strategy="tensor"),
                                           "config_groups.group_0.weights.strategy is \"tensor\""),
    "compressed-tensors group size 48": ("ct-w4a16", None, lambda c: ctw(c).update(group_size=48),
                                         "config_groups.group_0.weights.group_size is 48"),
    "compressed-tensors dynamic": ("ct-w4a16", None, lambda c: ctw(c).update(dynamic=True),
                                   "config_groups.group_0.weights.dynamic is true"),
    "compressed-tensors kv cache": ("ct-w4a16", None, lambda c: ct(c).update(kv_cache_scheme={"num_bits": 8}),
                                    "quantization_config.kv_cache_scheme is {"),
    "compressed-tensors sparsity": ("ct-w4a16", None, lambda c: ct(c).update(sparsity_config={"format": "sparse-24-bitmask"}),
                                    "quantization_config.sparsity_config is {"),
    "compressed-tensors two schemes": ("ct-w4a16", None,
                                       lambda c: ct(c)["config_groups"].update(
                                           group_1={"targets": ["re:.*down_proj"],
                                                    "weights": {**ctw(c), "num_bits": 8}}),
                                       "config_groups.group_1.weights differs from the first config group's"),
    "compressed-tensors status frozen": ("ct-w4a16", None, lambda c: ct(c).update(quantization_status="frozen"),
                                         "quantization_config.quantization_status is \"frozen\""),
    "compressed-tensors missing weight_shape": ("ct-w4a16", lambda t: t.pop(K0 + "weight_shape"), None,
                                                "model.layers.0.self_attn.k_proj has no weight_shape"),
    "compressed-tensors missing zero point": ("ct-w8a16-asym", lambda t: t.pop(K0 + "weight_zero_point"), None,
                                              "model.layers.0.self_attn.k_proj has no weight_zero_point"),
    "compressed-tensors scales of the wrong shape": ("ct-w4a16", lambda t: t.update({K0 + "weight_scale": t[K0 + "weight_scale"][:32]}),
                                                     None, "k_proj.weight_scale has shape [32, 1], want [64, 1]"),
    "compressed-tensors weight_shape against the packing": ("ct-w4a16", lambda t: t[K0 + "weight_shape"].__setitem__(1, 256),
                                                            None, "k_proj.weight_packed has shape [64, 16], want [64, 32]"),
    "compressed-tensors with a GPTQ part": ("ct-w4a16", lambda t: t.update({K0 + "qweight": t[K0 + "weight_packed"]}),
                                            None, "k_proj.qweight is a GPTQ or AWQ part, but quantization_config says "
                                            "compressed-tensors"),
    "GPTQ with a compressed-tensors part": ("gptq-sym4", lambda t: t.update({L0 + "weight_shape": np.array([128, 128])}),
                                            None, "q_proj.weight_shape is a compressed-tensors part, but "
                                            "quantization_config says GPTQ"),
    "marlin format": ("gptq-sym4", None, lambda c: c["quantization_config"].update(checkpoint_format="marlin"),
                      "quantization_config.checkpoint_format is \"marlin\""),
    "group size 48": ("gptq-sym4", None, lambda c: c["quantization_config"].update(group_size=48),
                      "quantization_config.group_size is 48"),
    "awq gemv": ("awq", None, lambda c: c["quantization_config"].update(version="gemv"),
                 "quantization_config.version is \"gemv\""),
    "awq without zero points": ("awq", None, lambda c: c["quantization_config"].update(zero_point=False),
                                "quantization_config.zero_point is false"),
    "awq 8 bits": ("awq", None, lambda c: c["quantization_config"].update(bits=8),
                   "quantization_config.bits is 8, which is not supported (AWQ: 4)"),
    "no quantization_config": ("gptq-sym4", None, lambda c: c.pop("quantization_config"),
                               "is a quantised weight, but config.json has no quantization_config"),
    "group size against the scales": ("gptq-sym4", None, lambda c: c["quantization_config"].update(group_size=32),
                                      "scales has shape ["),
}


@pytest.mark.parametrize("what", list(BAD))
def test_malformed_folder_is_one_clear_error(what, ids, tmp_path):
    case, fn, quant, words = BAD[what]
    d = str(tmp_path / "q")
    Q.write(d, case, seed=6)
    edit(d, fn, quant)
    r, _ = logits(d, ids, str(tmp_path))
    assert r.returncode == 1, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("logits: open:"), r.stderr
    assert words in lines[0], lines[0]


def info_of(tmp_path, case):
    """thincuda info's output on a folder of the case (CPU), and the folder's modules."""
    d = str(tmp_path / case)
    modules = Q.write(d, case, seed=7)
    tok = os.path.join(HERE, "data", "mistral-v1.tokenizer.json")  # info opens the tokenizer
    shutil.copy(tok, os.path.join(d, "tokenizer.json"))
    r = subprocess.run([EXE, "info", "--model", d, "--device", "cpu"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout, modules


def held_ratio(out):
    """The matrices' bytes as held against the checkpoint's, as info prints it."""
    m = re.search(r"MiB in the checkpoint, held in [\d.]+ MiB \(([\d.]+)x\)", out)
    assert m, out
    return float(m.group(1))


def test_info_names_the_quantisation(tmp_path):
    if not os.path.exists(EXE):
        pytest.skip(f"{EXE} is not built")
    out, _ = info_of(tmp_path, "gptq-sym4")
    assert "GPTQ 4-bit, group 64, symmetric, act-order no, format gptq (zeros stored less 1)" in out, out
    assert "q4_0 x14" in out, out
    assert "14 matrices" in out, out
    out, _ = info_of(tmp_path, "awq")
    assert "AWQ 4-bit, group 64, zero points, act-order no, format gemm" in out, out
    assert "q4_1_g64 x14" in out, out
    # Held against the checkpoint's bytes: 36 bytes a 64 weights against 32 of qweight, 2 of
    # scales and 0.5 of qzeros (1.04x)
    assert abs(held_ratio(out) - 36 / 34.5) < 0.006, out
    out, _ = info_of(tmp_path, "ct-w4a16-asym")
    assert "compressed-tensors 4-bit, group 32, zero points, act-order no, format pack-quantized" in out, out
    assert "q4_1 x14" in out, out
    # A group per column as q4_1_g128: 68 bytes a 128 weights against 64 of qweight and a row's
    # scale, zero and its inputs' g_idx (0.96x at these 128 x 128 matrices; 7B's: 1.06x)
    out, modules = info_of(tmp_path, "gptq-asym4-col")
    ckpt = sum(p.nbytes for parts in modules.values() for p in parts.values())
    held = sum(parts["qweight"].size * 8 // 128 * 68 for parts in modules.values())
    assert "GPTQ 4-bit, per column, zero points" in out, out
    assert "q4_1_g128 x14" in out, out
    assert abs(held_ratio(out) - held / ckpt) < 0.006, out
