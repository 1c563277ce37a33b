"""The kernel reader (gen/kernels.py) and the launchers it feeds: what crosses into C, what is
refused with a message, and that kernels/meson.build compiles every kernel file the generator
reads."""
import os
import re

import pytest

import kernels
from model import GenError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(tmp_path, body, name="k.cu"):
    path = tmp_path / name
    path.write_text('#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <stdint.h>\n' + body)
    return kernels.read_file(str(path), str(tmp_path))


def test_parameters_map_to_c_types_sizes_and_constness(tmp_path):
    ks = read(tmp_path, '''
/** Doc line one.
 *  Doc line two. */
extern "C" __global__ void tc_k_demo_f16(const __half *__restrict__ x, __nv_bfloat16 *y,
    half h, size_t n, int64_t m, unsigned char c, double d, const void *raw) {}
namespace { __device__ float4 load(const float4 *p) { return *p; } }
''')
    assert [k.name for k in ks] == ["tc_k_demo_f16"]
    k = ks[0]
    assert k.short == "demo_f16" and k.line == 7 and k.doc == "Doc line one. Doc line two."
    got = [(p.name, p.c_type, p.size, p.const_pointee) for p in k.params]
    assert got == [("x", "const tc_half *", 8, True), ("y", "tc_bf16 *", 8, False),
                   ("h", "tc_half", 2, False), ("n", "size_t", 8, False),
                   ("m", "int64_t", 8, False), ("c", "unsigned char", 1, False),
                   ("d", "double", 8, False), ("raw", "const void *", 8, True)]


def test_a_tensor_map_crosses_by_value_as_grid_constant_or_by_pointer(tmp_path):
    ks = read(tmp_path, '''#include <cuda.h>
extern "C" __global__ void tc_k_tma_f16(const __grid_constant__ CUtensorMap map,
    const CUtensorMap *maps, int32_t n) {}
''')
    got = [(p.name, p.c_type, p.size, p.align, p.pointer) for p in ks[0].params]
    assert got == [("map", "CUtensorMap", 128, 64, False),
                   ("maps", "const CUtensorMap *", 8, 8, True), ("n", "int32_t", 4, 4, False)]


@pytest.mark.parametrize("decl", ["CUtensorMap map", "const CUtensorMap map",
                                  "__grid_constant__ CUtensorMap map"])
def test_a_tensor_map_by_value_must_be_const_grid_constant(tmp_path, decl):
    with pytest.raises(GenError, match="must be declared const __grid_constant__"):
        read(tmp_path, '#include <cuda.h>\nextern "C" __global__ void tc_k_t(%s) {}\n' % decl)


@pytest.mark.parametrize("body, words", [
    ('__global__ void tc_k_cpp(int x) {}', 'must be declared extern "C"'),
    ('extern "C" __global__ void other(int x) {}', "start with tc_k_"),
    ('struct P { int a; };\nextern "C" __global__ void tc_k_s(P p) {}', "cannot cross into C"),
    ('extern "C" __global__ void tc_k_pp(float **p) {}', "pointer-to-pointer"),
    ('extern "C" __global__ void tc_k_bad(int x) { this is not C++ }', None),
    ('extern "C" __global__ void tc_k_t(undeclared_t x) {}', "could not read"),
])
def test_unsupported_kernels_are_refused_with_a_reason(tmp_path, body, words):
    if words is None:
        # Bodies are skipped: a body the prelude cannot compile does not matter.
        assert [k.name for k in read(tmp_path, body)] == ["tc_k_bad"]
        return
    with pytest.raises(GenError, match=re.escape(words)):
        read(tmp_path, body)


def test_kernel_names_are_unique_across_files(tmp_path):
    for f in ("a.cu", "b.cu"):
        (tmp_path / f).write_text('extern "C" __global__ void tc_k_same(int x) {}\n')
    with pytest.raises(GenError, match="defined in both"):
        kernels.read_all(str(tmp_path))


def test_meson_compiles_every_kernel_file():
    # The fatbins' lists (main_sources, fp8_sources, split_sources) name every kernel file once.
    text = open(os.path.join(ROOT, "kernels", "meson.build")).read()
    listed = []
    for part in ("main_sources", "fp8_sources", "split_sources"):
        files_call = re.search(part + r" = files\(([^)]*)\)", text).group(1)
        listed += re.findall(r"'([\w.]+\.cu)'", files_call)
    present = {f for f in os.listdir(os.path.join(ROOT, "kernels")) if f.endswith(".cu")}
    assert sorted(listed) == sorted(present)
    assert "kernel_sources = main_sources + fp8_sources + split_sources" in text


def test_launchers_check_types_and_table_matches(rendered):
    files, _ = rendered
    h, c = files["tc_kernels.h"], files["tc_kernels.c"]
    ks = kernels.read_all(os.path.join(ROOT, "kernels"))
    assert "TC_KERNEL_COUNT = %d" % len(ks) in h
    for k in ks:
        assert "tc_launch_%s(tc_launch_config cfg" % k.short in h
        assert '{"%s", "%s", %d, %d,' % (k.name, k.file, k.line, len(k.params)) in c
    assert "TC__KARG_CONST(const uint8_t *, uint8_t *, src)" in h


def test_every_kernel_waits_for_its_inputs_before_touching_memory():
    """Launches on an overlapped stream (tc_stream_set_overlap) may start while the previous
    kernel runs: each kernel's body must begin with tc::await_inputs(), except the matrix-vector
    kernels, whose shared bodies (matvec_cu::by_rows and, on the tensor cores, mma_rows; the
    quantised ones' quant_cu::mma_rows, which requests its first weight steps, and the batch-1
    ones' quant_cu::q8_kernel, which also zeroes 32 bytes of its shared memory, or q8_pair, which
    hands each block to the body of q8_kernel (q8_rows) for one of its two products, or q8_kernel2,
    the same body for two rows of x; the batched
    ones' quant_cu::batch_kernel, which requests its first stages' weights, or batch_pair, which
    hands each block to batch_kernel's body for one of its two products) read only
    weights before calling it, and the decode attention kernels, whose body
    (attention_cu::decode) waits at once unless the
    caller allows early reads (fresh_rows), and then reads only the lengths, the table and the
    cache before waiting: never q, and it writes nothing. The column gather and the rotary
    kernels begin with tc::launch_next_then_await(), which waits the same way after letting the
    next kernel start."""
    missing = []
    for f in sorted(os.listdir(os.path.join(ROOT, "kernels"))):
        if not f.endswith(".cu"):
            continue
        text = open(os.path.join(ROOT, "kernels", f)).read()
        for m in re.finditer(r'extern "C" __global__ void[^{]*?(tc_k_\w+)\([^)]*\)\s*\{\s*([^;]*;)', text):
            name, first = m.group(1), m.group(2)
            if name.startswith("tc_k_matvec_mma"):
                assert "matvec_cu::mma_rows<" in first, name
                continue
            if name.startswith("tc_k_matvec"):
                assert first.startswith("matvec_cu::by_rows"), name
                continue
            if name.startswith("tc_k_qmv_"):
                assert first.startswith("quant_cu::mma_kernel<"), name
                continue
            if name.startswith("tc_k_qmv1_"):
                assert first.startswith(("quant_cu::q8_kernel<", "quant_cu::q8_pair<")), name
                continue
            if name.startswith("tc_k_qmv2_"):
                assert first.startswith("quant_cu::q8_kernel2<"), name
                continue
            if name.startswith("tc_k_qmm_pair_"):
                assert first.startswith("quant_cu::batch_pair<"), name
                continue
            if name.startswith("tc_k_qmm"):
                assert first.startswith("quant_cu::batch_kernel<"), name
                continue
            if name.startswith("tc_k_attn_decode"):
                assert first.startswith("attention_cu::decode<"), name
                continue
            if name.startswith("tc_k_gather_columns"):
                assert first.strip() == "tc::launch_next_then_await();", name
                continue
            if name.startswith("tc_k_rope"):
                assert first.startswith("rope_cu::run("), name
                continue
            if first.strip() != "tc::await_inputs();":
                missing.append(f"{f}: {name}")
    assert not missing, "kernels that do not begin with tc::await_inputs(): " + ", ".join(missing)
    # q8_pair touches nothing itself: each block goes straight to q8_rows for one product.
    quant = open(os.path.join(ROOT, "kernels", "quant.cu")).read()
    pair = quant[quant.index("__device__ __forceinline__ void q8_pair("):]
    body = pair[pair.index("{") + 1:pair.index("\n}")]
    statements = [t.strip() for t in re.split(r"[;{}]", re.sub(r"//[^\n]*", "", body)) if t.strip()]
    calls = [re.sub(r"^(if \(blockIdx\.x < split\)|else)\s*", "", t) for t in statements]
    assert len(statements) == 2 and statements[0].startswith("if (blockIdx.x < split)"), statements
    assert statements[1].startswith("else") and all(
        c.startswith("q8_rows<") and "=" not in c and c.count("(") == c.count(")") for c in calls), statements
    # batch_pair touches nothing itself either: it reads its shared memory's size, works out
    # where w_a's tiles end, and hands each block to mma_batch (batch_kernel's body) for one of
    # its two products.
    bpair = quant[quant.index("__device__ __forceinline__ void batch_pair("):]
    bbody = re.sub(r"//[^\n]*", "", bpair[bpair.index("{") + 1:bpair.index("\n}")])
    size = 'asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes))'
    assert bbody.count(size) == 1
    stmts = [t.strip() for t in re.split(r"[;{}]", bbody.replace(size, "asm(size)")) if t.strip()]
    allowed = ("if constexpr (!kBatchWg)", "__trap()", "extern __shared__", "uint32_t bytes", "asm(size)",
               "const uint32_t ta = (uint32_t)((n_a + kBatchRows - 1) / kBatchRows)", "if (blockIdx.x < ta)", "else")
    products = [t for t in stmts if not t.startswith(allowed) or "mma_batch<" in t]
    assert len(products) == 2 and all(
        re.sub(r"^(if \(blockIdx\.x < ta\)|else)\s*", "", t).startswith("mma_batch<") for t in products), stmts
    # The rotary kernels' body lets the next kernel start, then reads only pos and slots (index
    # arrays that no kernel writes) and works out the angles into shared memory before it
    # waits: never q, k, v or the caches.
    rope = open(os.path.join(ROOT, "kernels", "rope.cu")).read()
    run = rope[rope.index("__device__ void run("):]
    run = run[run.index("{"):]
    before_wait = run[:run.index("tc::await_grids();")]
    assert before_wait.index("tc::launch_next();") < before_wait.index("pos[row]")
    for touched in ("q[", "k[", "v[", "q +", "k +", "v +", "k_cache[", "v_cache[", "each_head", "move<"):
        assert touched not in before_wait, f"rope_cu::run touches {touched!r} before it waits"
    assert re.findall(r"\b(\w+)\[", before_wait) and set(re.findall(r"\b(\w+)\[", before_wait)) <= {
        "cs", "sn", "slots", "pos"}, "rope_cu::run reads or writes other arrays before it waits"
    body = open(os.path.join(ROOT, "kernels", "matvec.cu")).read()
    by_rows = body[body.index("__device__ void by_rows"):]
    before_wait = by_rows[:by_rows.index("tc::await_inputs();")]
    assert "out[" not in before_wait and "x[" not in before_wait
    # The fused rotation's inputs (position, slot, caches) are read only after the wait.
    for touched in ("pos", "slots", "cache", "rope_rows"):
        assert touched not in before_wait, f"by_rows touches {touched!r} before it waits"
    # The tensor-core kernel of 2-8 rows: only weights (an L2 prefetch) before the wait.
    mma = body[body.index("__device__ void mma_rows"):]
    mma = mma[mma.index("{"):]
    code = "\n".join(line.split("//")[0] for line in mma[:mma.index("tc::await_inputs();")].splitlines())
    for touched in (r"\bout\b", r"(?<![.\w])x\b", r"\bxr\b"):
        assert not re.search(touched, code), f"mma_rows touches {touched!r} before it waits"
    assert "prefetch_l2(w +" in code
    # The quantised tensor-core kernels: only weight copies (issue) before the wait.
    body = open(os.path.join(ROOT, "kernels", "quant.cu")).read()
    kernel = body[body.index("__device__ __forceinline__ void mma_kernel"):]
    kernel = kernel[:kernel.index("\n}\n")]
    assert re.search(r"\{\s*__shared__[^;]*;\s*extern __shared__[^;]*;\s*uint32_t bytes;\s*asm\(.*?\);"
                     r"\s*const int nst[^;]*;\s*if \(nst < 1\)\s*__trap\(\);\s*mma_rows<", kernel), \
        "mma_kernel must go straight to mma_rows"
    mma = body[body.index("__device__ void mma_rows"):]
    mma = mma[mma.index("{"):]
    code = "\n".join(line.split("//")[0] for line in mma[:mma.index("tc::await_inputs();")].splitlines())
    for touched in (r"\bout\b", r"(?<![.\w])x\b", r"\bxr\b", r"\bred\b\["):
        assert not re.search(touched, code), f"quant mma_rows touches {touched!r} before it waits"
    # (the weight copies go through copy_unit, a cp.async of one 16-byte unit of a field)
    assert "copy_unit<" in code
    unit = body[body.index("void copy_unit("):]
    unit = unit[:unit.index("\n}\n")]
    assert "cp_async16_s(" in unit and not re.search(r"\bx\b|\bout\b", unit)
    body = open(os.path.join(ROOT, "kernels", "attention_decode.cu")).read()
    decode = body[body.index("__device__ void decode("):]
    head = decode[:decode.index("{") + 1]
    start = decode[len(head):]
    assert re.match(r"\s*(//[^\n]*\n\s*)*((constexpr|const int)[^;]*;\s*)+int S = stages;\s*(//[^\n]*\n\s*)*"
                    r"if \(fresh < 0\)\s*tc::await_inputs\(\);", start), "decode must wait first by default"
    early = start[:start.index("if (fresh >= 0) {")]
    code = "\n".join(line.split("//")[0] for line in early.splitlines())
    for touched in ("out[", "out +", "part[", "part +", "counters", "q[", "q +", "q_stride", "k_scale[",
                    "v_scale["):
        assert touched not in code, f"decode touches {touched!r} before it waits"
