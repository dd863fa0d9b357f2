"""Regenerate the corpus of real tileiras PTX with call-site markers (tests/corpus/*.ptx).

Each kernel of tests/support/kernels.py is traced and lowered by tileiras for a few architectures;
the PTX tileiras hands to ptxas is saved with a JSON sidecar listing each call site's
index, signature and marker kind ("atomic" or "fma"), with the markers the pipeline ends with.
tests/test_corpus.py rewrites every file with the PTX rewriter.

    python tests/corpus/make_corpus.py
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import cuda.tile as ct

import splice
from splice.system import toolchain
from splice.tracing import trace
from support import kernels as K

f32 = ct.float32
CASES = {
    "saxpy_64": (K.saxpy_kernel, K.signature(K.array(f32), K.array(f32), K.array(f32),
                                             K.scalar(f32), 64), ["sm_80", "sm_90", "sm_100"]),
    "saxpy_4096": (K.saxpy_kernel, K.signature(K.array(f32), K.array(f32), K.array(f32),
                                               K.scalar(f32), 4096), ["sm_90"]),
    "mixed_256": (K.mixed_kernel, K.signature(K.array(ct.int8), K.array(ct.float16),
                                              K.array(ct.bool_), K.array(ct.int32),
                                              K.array(f32), K.array(ct.float64), 256),
                  ["sm_90"]),
    "control": (K.control_kernel, K.signature(K.array(f32), K.array(f32), 3, 256),
                ["sm_80", "sm_90"]),
    "count_64": (K.count_kernel, K.signature(K.array(ct.uint32), K.scalar(ct.int64), 64),
                 ["sm_90", "sm_100"]),
    "broadcast": (K.broadcast_kernel, K.signature(K.array(f32, 2), K.array(f32, 2),
                                                  K.array(f32, 2), K.scalar(f32), 32, 64),
                  ["sm_90"]),
    "scalar": (K.scalar_kernel, K.signature(K.array(f32), K.scalar(f32), K.scalar(f32)),
               ["sm_90"]),
    "matmul_gelu": (K.matmul_gelu_kernel, K.signature(K.array(ct.float16, 2),
                                                      K.array(ct.float16, 2),
                                                      K.array(ct.float16, 2), 128, 128, 64),
                    ["sm_90"]),
    "float16_type": (K.TYPE_KERNELS["float16", "never"], K.signature(K.array(ct.float16),
                                                            K.array(ct.float16), 128),
                     ["sm_90"]),
    "bool_type": (K.TYPE_KERNELS["bool", "never"], K.signature(K.array(ct.bool_), K.array(ct.bool_),
                                                      1024), ["sm_90"]),
}


def main():
    for name, (kern, sig, archs) in CASES.items():
        for arch in archs:
            # the markers the pipeline ends with (atomic where it had to fall back)
            build = splice.compile(kern, sig, arch)
            keys = [s.key for s in trace.trace_kernel(kern, sig, arch).sites]
            atomic = frozenset(keys[s.index] for s in build.sites if s.why_atomic)
            traced = trace.trace_kernel(kern, sig, arch, atomic_sites=atomic)
            cap = toolchain.run_tileiras(traced.bytecode, traced.tileiras_flags, timeout=None,
                                         what=name)
            stem = f"{name}.{arch}"
            (HERE / f"{stem}.ptx").write_text(cap.ptx)
            (HERE / f"{stem}.json").write_text(json.dumps(
                {str(s.index): [str(s.extern.signature), str(s.marker)] for s in traced.sites},
                indent=1) + "\n")
            print(stem, len(cap.ptx))
    # control_kernel with fma markers everywhere: LLVM merges sites 1 and 2 (the arms of
    # its if/else) -- the rewriter must refuse it (test_corpus expects the report to refuse them)
    kern, sig, _ = CASES["control"]
    traced = trace.trace_kernel(kern, sig, "sm_90")
    cap = toolchain.run_tileiras(traced.bytecode, traced.tileiras_flags, timeout=None,
                                 what="control_merged")
    (HERE / "control_merged.sm_90.ptx").write_text(cap.ptx)
    (HERE / "control_merged.sm_90.json").write_text(json.dumps(
        {str(s.index): [str(s.extern.signature), str(s.marker)] for s in traced.sites},
        indent=1) + "\n")


if __name__ == "__main__":
    main()
