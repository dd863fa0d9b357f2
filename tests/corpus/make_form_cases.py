"""Regenerate the golden per-form cases (tests/corpus/forms/): real tileiras PTX with one
form's call sites, and what splice's rewriter makes of them, on sm_80, sm_90 and sm_100.

For each case: ``<form>.<shape>.<arch>.ptx`` (the PTX tileiras hands to ptxas),
``.json`` (each site's index, signature, form, marker width and tile-call part) and
``.check`` (FileCheck lines: each span of the rewritten PTX, its first line ``CHECK:`` and
the rest ``CHECK-NEXT:``, tileiras's registers and labels captured;
:func:`support.form_cases.check_lines`). tests/test_form_cases.py rewrites each input and
runs FileCheck on the output. Regenerate a case only when splice's output changes on
purpose, and read the difference of its ``.check`` before committing it.

    python tests/corpus/make_form_cases.py [arch ...]    # the inputs too
    python tests/corpus/make_form_cases.py --checks       # the .check files only
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = str(HERE.parent.parent) + "/"
sys.path.insert(0, str(HERE.parent))

import cuda.tile as ct

import splice
from splice.tracing import trace
from support import kernels as K
from support.form_cases import (
    CASES,
    FORMS_BY_ARCH,
    check_lines,
    load,
    rewrite_case,
    site_record,
    stems,
)

f16, f32 = ct.float16, ct.float32
ConstInt = ct.Constant[int]

# block scope: the block's sum of (threadIdx.x + a) by shuffles, every thread the same value
block_count = splice.extern(source=r'''
extern "C" __device__ int block_count(int a) {
    int v = a;
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    return v * (int)(blockDim.x / 32);
}''', name="block_count", scope="block", signature="int32(int32)")(lambda a: None)

# warpgroup scope: a + the group's thread count, counted by shuffles and the group's barrier
group_count = splice.extern(source=r'''
#include <splice_group.h>
extern "C" __device__ int group_count(int a) {
    __shared__ int per_warp[4];
    int v = 1;
    for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
    if ((splice_group_rank() & 31) == 0) per_warp[splice_group_rank() / 32] = v;
    splice_group_sync();
    int total = per_warp[0] + per_warp[1] + per_warp[2] + per_warp[3];
    splice_group_sync();
    return a + total;
}''', name="group_count", scope="warpgroup", signature="int32(int32)")(lambda a: None)

# element scope: a pure call (the fma marker) and an impure one (the atomic marker)
scale_add = splice.extern(source=r'''
extern "C" __device__ float scale_add(float x, float a) { return a * x + 1.0f; }''',
                          name="scale_add", signature="float32(float32, float32)")
counted = splice.extern(source=r'''
extern "C" __device__ float counted(int *n, float x) { atomicAdd(n, 1); return -x; }''',
                        name="counted", signature="float32(int32*, float32)", pure=False)

# a block tile call: y = x reversed, the tiles staged in shared memory around the call
reverse_tile = splice.extern(source=r'''
template <int N> __device__ void reverse_tile(const float (&x)[N], float (&y)[N]) {
    for (int i = threadIdx.x; i < N; i += blockDim.x) y[i] = x[N - 1 - i];
}''', name="reverse_tile", scope="block", signature="tile(float32)(tile(float32))")


@splice.kernel
def element_kernel(x, y, n, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=counted(n, scale_add(t, 2.0)))


@splice.kernel
def block_add_kernel(x, y, TILE: ConstInt):
    bid = ct.bid(0)
    t = ct.load(x, index=(bid,), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(bid,), tile=t + block_count(bid))


@splice.kernel
def matmul_group_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = K.matmul_tile(A, B, tm, tn, tk)
    s = group_count(ct.bid(0))
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc + s, C.dtype))


@splice.kernel
def reverse_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,), allow_tma=False)
    ct.store(y, index=(ct.bid(0),), tile=reverse_tile(t) + 1.0)


MATMUL = K.signature(K.array(f16, 2), K.array(f16, 2), K.array(f16, 2), 128, 128, 64)
KERNELS = {
    "element.pure_and_impure": (element_kernel, K.signature(K.array(f32), K.array(f32),
                                                             K.array(ct.int32), 256)),
    "block.vector_add": (block_add_kernel, K.signature(K.array(f32), K.array(f32), 256)),
    "warpgroup.tma_matmul_epilogue": (matmul_group_kernel, MATMUL),
    "staging.block_tile_reverse": (reverse_kernel, K.signature(K.array(f32), K.array(f32),
                                                                256)),
}


def main(arch: str) -> None:
    for name, (kern, sig) in KERNELS.items():
        if name.split(".")[0] not in FORMS_BY_ARCH[arch]:
            continue
        # source paths relative to the repository (tileiras's .file, the sites' "where")
        ptx = splice.compile(kern, sig, arch).ptx.replace(ROOT, "")
        sites = trace.trace_kernel(kern, sig, arch).sites
        records = json.loads(json.dumps({str(s.index): site_record(s) for s in sites})
                             .replace(ROOT, ""))
        stem = f"{name}.{arch}"
        (CASES / f"{stem}.ptx").write_text(ptx)
        (CASES / f"{stem}.json").write_text(json.dumps(records, indent=1) + "\n")
        (CASES / f"{stem}.check").write_text(check_lines(ptx, rewrite_case(ptx, records,
                                                                           stem)))
        print(stem, len(records), "site(s)")


def checks_only() -> None:
    """Each case's ``.check`` made again from its committed input (``--checks``)."""
    for stem in stems():
        ptx, records, check = load(stem)
        check.write_text(check_lines(ptx, rewrite_case(ptx, records, stem)))


if __name__ == "__main__":
    if sys.argv[1:] == ["--checks"]:
        checks_only()
    for a in [] if sys.argv[1:] == ["--checks"] else sys.argv[1:] or FORMS_BY_ARCH:
        main(a)
