"""Inlined externs and inline PTX, side by side with their baselines (medians, ratios).

1. compute-bound: a 32-term polynomial per element (Horner, applied `reps` times in a
   loop whose trip count is a kernel argument), an extern inlined vs. the same
   computation in pure cuTile                                   (target <= 1.05)
   1b. the same with a constant trip count (16)                 (reported: LLVM inside
       tileiras fully unrolls the loop around the small call marker but not around the
       pure-cuTile body, so the inlined version is 16x larger code)
2. the same extern called (inline="never") vs. inlined          (reported)
3. inline PTX (tanh.approx.f32) with splice.asm vs. Triton's
   tl.inline_asm_elementwise for the same op                    (target <= 1.0)
4. TMA matmul (fp16, 4096^3, tiles 128x128x64) with an inlined epilogue (leaky ReLU) vs.
   the plain cuTile matmul                                      (target <= 1.03)
   4c. the same leaky-ReLU epilogue written in cuTile               (reported)
   4b. a fast-GELU epilogue (x / (1 + exp(-1.702 x))) inlined vs. the same epilogue
       written in cuTile                                        (reported)
5. the polynomial of 1 as inline CUDA C (splice.cuda, the extern's body pasted in the
   kernel) vs. the same code as an extern                       (target <= 1.00)
   5b. the same splice.cuda snippet vs. pure cuTile             (reported; 1's target)
   5c. the fast-GELU matmul epilogue of 4b as a splice.cuda snippet vs. the extern
                                                                (target <= 1.00)

    python benchmarks/bench_inline.py [--reps 30]
"""

import argparse
import sys

import cuda.tile as ct
import torch
from _kernels import matmul_tile
from _timing import time_callable_side_by_side, time_side_by_side

import splice

ConstInt = ct.Constant[int]
COEFFS = tuple((-1) ** i / (i + 2) ** 2 for i in range(32))
REPS = 16

_POLY_SRC = ("extern \"C\" __device__ float poly32(float x) {\n"
             f"    float acc = {COEFFS[31]!r}f;\n" +
             "".join(f"    acc = fmaf(acc, x, {c!r}f);\n" for c in reversed(COEFFS[:31])) +
             "    return acc;\n}\n")

poly_inlined = splice.extern(source=_POLY_SRC, name="poly32",
                             signature="float32(float32)")(lambda x: None)
poly_called = splice.extern(source=_POLY_SRC, name="poly32", inline="never",
                            signature="float32(float32)")(lambda x: None)


#: The body of poly32 as a splice.cuda snippet (its parameter: x).
POLY_BODY = _POLY_SRC.split("{", 1)[1].rsplit("}", 1)[0]


@splice.kernel
def poly_cuda_kernel(x, y, reps: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    for r in range(reps):
        t = splice.cuda(POLY_BODY, dtype=ct.float32, x=t)
    ct.store(y, index=(ct.bid(0),), tile=t)


def _poly_kernel(fn):
    @splice.kernel
    def poly_kernel(x, y, reps: int, TILE: ConstInt):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        for r in range(reps):
            t = fn(t)
        ct.store(y, index=(ct.bid(0),), tile=t)
    return poly_kernel


poly_inlined_kernel = _poly_kernel(poly_inlined)
poly_called_kernel = _poly_kernel(poly_called)


@splice.kernel
def poly_inlined_const_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    for r in range(REPS):
        t = poly_inlined(t)
    ct.store(y, index=(ct.bid(0),), tile=t)


def poly_tile(t, TILE):
    acc = ct.full((TILE,), COEFFS[31], dtype=ct.float32)
    for c in ct.static_iter(reversed(COEFFS[:31])):
        acc = acc * t + c
    return acc


@ct.kernel
def poly_cutile_kernel(x, y, reps: int, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    for r in range(reps):
        t = poly_tile(t, TILE)
    ct.store(y, index=(ct.bid(0),), tile=t)


@ct.kernel
def poly_cutile_const_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    for r in range(REPS):
        t = poly_tile(t, TILE)
    ct.store(y, index=(ct.bid(0),), tile=t)


@splice.kernel
def tanh_asm_kernel(x, y, TILE: ConstInt):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=splice.asm("tanh.approx.f32 $0, $1;", t,
                                                     dtype=ct.float32))


@splice.extern(source=r'''
extern "C" __device__ float fast_gelu(float x) { return x / (1.0f + __expf(-1.702f * x)); }''')
def fast_gelu(x: ct.float32) -> ct.float32: ...


@splice.extern(source=r'''
extern "C" __device__ float leaky_relu(float x) { return fmaxf(x, 0.01f * x); }''')
def leaky_relu(x: ct.float32) -> ct.float32: ...


@splice.kernel
def matmul_epilogue_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = matmul_tile(A, B, tm, tn, tk)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(leaky_relu(acc), C.dtype))


@splice.kernel
def matmul_gelu_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = matmul_tile(A, B, tm, tn, tk)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(fast_gelu(acc), C.dtype))


@splice.kernel
def matmul_cuda_gelu_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = matmul_tile(A, B, tm, tn, tk)
    g = splice.cuda("x / (1.0f + __expf(-1.702f * x))", dtype=ct.float32, x=acc)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(g, C.dtype))


@ct.kernel
def matmul_plain_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = matmul_tile(A, B, tm, tn, tk)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, C.dtype))


@ct.kernel
def matmul_cutile_leaky_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = matmul_tile(A, B, tm, tn, tk)
    acc = ct.maximum(acc, 0.01 * acc)
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, C.dtype))


@ct.kernel
def matmul_cutile_epilogue_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    acc = matmul_tile(A, B, tm, tn, tk)
    acc = acc / (1.0 + ct.exp(-1.702 * acc))
    ct.store(C, index=(ct.bid(0), ct.bid(1)), tile=ct.astype(acc, C.dtype))


def _triton_tanh():
    import triton
    import triton.language as tl

    @triton.jit
    def tanh_triton(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        y = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x],
                                      dtype=tl.float32, is_pure=True, pack=1)
        tl.store(y_ptr + offs, y)
    return tanh_triton


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=30)
    a = p.parse_args(argv)
    rows = []

    # 1 + 2: compute-bound polynomial
    n, tile = 16 << 20, 1024
    x = torch.rand(n, device="cuda") * 2 - 1
    ys = {k: torch.empty_like(x) for k in ("inlined", "called", "cutile", "cuda")}
    grid = (n // tile,)
    ys["inlined_const"], ys["cutile_const"] = torch.empty_like(x), torch.empty_like(x)
    med = time_side_by_side(torch, {
        "inlined": (grid, poly_inlined_kernel, (x, ys["inlined"], REPS, tile)),
        "called": (grid, poly_called_kernel, (x, ys["called"], REPS, tile)),
        "cutile": (grid, poly_cutile_kernel, (x, ys["cutile"], REPS, tile)),
        "inlined_const": (grid, poly_inlined_const_kernel, (x, ys["inlined_const"], tile)),
        "cutile_const": (grid, poly_cutile_const_kernel, (x, ys["cutile_const"], tile)),
        "cuda": (grid, poly_cuda_kernel, (x, ys["cuda"], REPS, tile)),
    }, reps=a.reps)
    torch.testing.assert_close(ys["cuda"], ys["inlined"], rtol=0, atol=0)  # the same code
    for k in ("called", "cutile", "inlined_const", "cutile_const"):
        torch.testing.assert_close(ys[k], ys["inlined"], rtol=1e-4, atol=1e-5)
    flops = 2 * 32 * REPS * n
    rows.append(("1 poly32 x16 (runtime trips), inlined / pure cuTile", med["inlined"],
                 med["cutile"], 1.05, f"{flops / med['inlined'] / 1e12:.1f} vs "
                                      f"{flops / med['cutile'] / 1e12:.1f} TFLOP/s"))
    rows.append(("1b poly32 x16 (constant trips), inlined / pure cuTile",
                 med["inlined_const"], med["cutile_const"], None, "loop unrolled by LLVM"))
    rows.append(("2 poly32 x16, extern called / inlined", med["called"], med["inlined"], None,
                 ""))
    rows.append(("5 poly32 x16, splice.cuda / extern (inlined)", med["cuda"], med["inlined"],
                 1.0, "the same CUDA C, pasted in the kernel / declared"))
    rows.append(("5b poly32 x16, splice.cuda / pure cuTile", med["cuda"], med["cutile"], None,
                 f"{flops / med['cuda'] / 1e12:.1f} TFLOP/s"))

    # 3: inline PTX vs Triton inline_asm_elementwise
    n, tile = 64 << 20, 1024
    x = torch.randn(n, device="cuda")
    y1, y2 = torch.empty_like(x), torch.empty_like(x)
    tanh_triton = _triton_tanh()
    stream = torch.cuda.current_stream()
    fns = {"splice": lambda: ct.launch(stream, (n // tile,), tanh_asm_kernel, (x, y1, tile)),
           "triton": lambda: tanh_triton[(n // tile,)](x, y2, BLOCK=tile)}
    med = time_callable_side_by_side(torch, fns, reps=a.reps)
    torch.testing.assert_close(y1, y2)
    gbs = 2 * n * 4
    rows.append(("3 tanh.approx asm, splice.asm / Triton", med["splice"], med["triton"], 1.0,
                 f"{gbs / med['splice'] / 1e9:.0f} vs {gbs / med['triton'] / 1e9:.0f} GB/s"))

    # 4: TMA matmul with inlined epilogue vs plain
    M = N = K = 4096
    A = torch.randn(M, K, dtype=torch.float16, device="cuda")
    B = torch.randn(K, N, dtype=torch.float16, device="cuda")
    C1, C2, C3, C4, C5, C6 = (torch.empty(M, N, dtype=torch.float16, device="cuda")
                              for _ in range(6))
    g = (M // 128, N // 128)
    med = time_side_by_side(torch, {
        "epilogue": (g, matmul_epilogue_kernel, (A, B, C1, 128, 128, 64)),
        "plain": (g, matmul_plain_kernel, (A, B, C2, 128, 128, 64)),
        "gelu": (g, matmul_gelu_kernel, (A, B, C4, 128, 128, 64)),
        "cutile_epilogue": (g, matmul_cutile_epilogue_kernel, (A, B, C3, 128, 128, 64)),
        "cutile_leaky": (g, matmul_cutile_leaky_kernel, (A, B, C5, 128, 128, 64)),
        "cuda_gelu": (g, matmul_cuda_gelu_kernel, (A, B, C6, 128, 128, 64)),
    }, reps=a.reps)
    acc = C2.float()
    torch.testing.assert_close(C1.float(), torch.maximum(acc, 0.01 * acc), rtol=2e-2,
                               atol=2e-2)
    torch.testing.assert_close(C4.float(), acc / (1 + torch.exp(-1.702 * acc)), rtol=2e-2,
                               atol=2e-2)
    torch.testing.assert_close(C1, C5)
    torch.testing.assert_close(C6, C4, rtol=0, atol=0)      # the same CUDA C
    fl = 2 * M * N * K
    rows.append(("4 TMA matmul 4096^3 fp16, leaky-ReLU epilogue / plain", med["epilogue"],
                 med["plain"], 1.03, f"{fl / med['epilogue'] / 1e12:.0f} vs "
                                     f"{fl / med['plain'] / 1e12:.0f} TFLOP/s"))
    rows.append(("4c leaky-ReLU epilogue, inlined / cuTile-written", med["epilogue"],
                 med["cutile_leaky"], None, "the epilogue's own cost is the rest of 4"))
    rows.append(("4b fast-GELU epilogue, inlined / cuTile-written", med["gelu"],
                 med["cutile_epilogue"], None,
                 f"{fl / med['cutile_epilogue'] / 1e12:.0f} TFLOP/s cuTile epilogue"))
    rows.append(("5c fast-GELU epilogue, splice.cuda / extern", med["cuda_gelu"], med["gelu"],
                 1.0, f"{fl / med['cuda_gelu'] / 1e12:.0f} TFLOP/s"))

    print(f"splice inline benchmarks on {torch.cuda.get_device_name()}, {a.reps} reps, medians")
    print(f"{'case':<52} {'ms':>9} {'base ms':>9} {'ratio':>7} {'target':>7}  notes")
    for name, t, base, target, note in rows:
        tgt = f"<={target}" if target else "-"
        print(f"{name:<52} {t * 1e3:>9.4f} {base * 1e3:>9.4f} {t / base:>7.3f} {tgt:>7}  "
              f"{note}")
    b = poly_inlined_kernel.inspect(x[:1024].clone(), ys["inlined"][:1024].clone(), REPS,
                                    1024)
    print("SASS CALLs in the inlined polynomial kernel:", b.sass_call_count("poly32"))
    b = poly_cuda_kernel.inspect(x[:1024].clone(), ys["cuda"][:1024].clone(), REPS, 1024)
    print("SASS CALLs in the splice.cuda polynomial kernel:", b.sass_call_count())


if __name__ == "__main__":
    sys.exit(main())
