"""Child of ``tests/test_plain_kernels_unchanged.py``: export the Tile IR bytecode (and, for
some, the sm_90 cubin) of plain ``@ct.kernel`` kernels through cuTile's own
``export_kernel``, and print {kernel: sha256} as JSON. With ``--splice``: first import splice
and compile spliced kernels (which installs splice's hook into cuTile's dataflow analysis)
and build the same plain kernels through splice once, then export them again with cuTile's.

Run: python tests/plain_bytecode_child.py [--splice]
"""

import hashlib
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cuda.tile as ct
from cuda.tile.compilation import export_kernel


def _plain_kernels():
    """(name, ct.kernel, signature, export a cubin too) of each plain kernel."""
    import importlib
    if "--splice" not in sys.argv:   # support.kernels imports splice: not in the plain run
        sys.modules["splice"] = None   # type: ignore[assignment]  (an import would fail)
    P = importlib.import_module("support.plain_kernels")
    from cuda.tile.compilation import (
        ArrayConstraint,
        CallingConvention,
        KernelSignature,
    )

    def arr(dtype, ndim=1):
        return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                               alias_groups=(), may_alias_internally=False,
                               stride_constant=(None,) * (ndim - 1) + (1,),
                               stride_divisible_by=(16,) * (ndim - 1) + (1,),
                               base_addr_divisible_by=16, shape_divisible_by=16)

    def sig(*p):
        return KernelSignature(list(p), CallingConvention.cutile_python_v1())

    f32, i32 = ct.float32, ct.int32

    @ct.kernel
    def tma_matmul(A, B, C, tm: ct.Constant[int], tn: ct.Constant[int]):
        acc = ct.full((tm, tn), 0, dtype=ct.float32)
        for k in range(ct.num_tiles(A, axis=1, shape=(tm, 32))):
            a = ct.load(A, index=(ct.bid(0), k), shape=(tm, 32))
            b = ct.load(B, index=(k, ct.bid(1)), shape=(32, tn))
            acc = ct.mma(a, b, acc)
        ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, C.dtype))

    return [
        ("f32_arith", P.f32_arith, sig(arr(f32), arr(f32), arr(f32), 128), True),
        ("int_arith", P.int_arith, sig(arr(i32), arr(i32), arr(i32), 128), False),
        ("row_reduce", P.row_reduce, sig(arr(f32, 2), arr(f32), arr(f32), 64), False),
        ("loop_tiles", P.loop_tiles, sig(arr(i32), arr(i32), 128), False),
        ("cumsum", P.cumsum_kernel, sig(arr(i32), arr(i32), 128), False),
        ("atomic_count", P.atomic_count, sig(arr(i32), arr(i32), 128), False),
        ("tma_matmul", tma_matmul, sig(arr(ct.float16, 2), arr(ct.float16, 2),
                                       arr(ct.float16, 2), 64, 64), True),
    ]


def _splice_first(kernels) -> None:
    """Import splice, compile spliced kernels, and each plain kernel through splice."""
    import splice
    from support import kernels as K
    splice.compile(K.saxpy_kernel, K.signature(K.array(ct.float32), K.array(ct.float32),
                                               K.array(ct.float32), K.scalar(ct.float32),
                                               256), "sm_90")
    splice.compile(K.matmul_gelu_kernel, K.signature(
        K.array(ct.float16, 2), K.array(ct.float16, 2), K.array(ct.float16, 2), 64, 64, 32),
        "sm_90")
    for _, kernel, sig, _ in kernels:
        splice.compile(kernel, sig, "sm_90")


def main() -> None:
    kernels = _plain_kernels()
    if "--splice" in sys.argv:
        _splice_first(kernels)
    out = {}
    for name, kernel, sig, cubin in kernels:
        for fmt in ("tileir_bytecode",) + (("cubin",) if cubin else ()):
            buf = io.BytesIO()
            export_kernel(kernel, [sig], buf, gpu_code="sm_90", output_format=fmt)
            out[f"{name}.{fmt}"] = hashlib.sha256(buf.getvalue()).hexdigest()
    out["splice imported"] = sys.modules.get("splice") is not None
    if out["splice imported"]:
        from splice.system import _cutile
        analysis = _cutile._private("_compile_module").dataflow_analysis
        out["hook installed"] = getattr(analysis, "_splice_alias_hook", False)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
