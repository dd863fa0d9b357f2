"""A tiny PTX interpreter: the oracle of the fma-marker rewrite.

The oracle runs the *original* PTX with a random key per site: at each marker fma, the
multiplicand that equals a site's key at run time is the key, the other one xor the key is
slot 0 and the addend xor the key slot 1. A program whose slots depend on the keys (run with
two sets of keys) is not a marker program on that path and is skipped. The *rewritten* PTX
runs with every register that is never written holding garbage (the same garbage in both
runs); its calls must see the same sites and slots, path by path.

It knows the few instructions the hand-written and generated kernels use: ``ld.param``,
key loads, ``setp.{eq,ne,lt}``, ``add``, ``sub``, ``mov``, ``xor``, ``not``, ``neg.f64``,
``fma``, ``st.param``, ``call``,
``bra``, ``ret`` and stores (ignored).
"""

from __future__ import annotations

import re

import numpy as np

from splice.forms.rewrite import MARKER_RE, splice_calls
from splice.ptxtools.ptx import Module

from .sites import fma_sites

MASK = (1 << 64) - 1
HEADER = ".version 9.4\n.target sm_90a\n.address_size 64\n\n"


def statements(text: str):
    """The entry's body as ("label", name) and ("ins", guard, opcode, operands) tuples."""
    body = text[text.index(".entry"):]
    body = body[body.index("{") + 1:]
    body = re.sub(r"//[^\n]*", "", body)
    out = []
    for piece in re.split(r";|\n", body):
        piece = piece.strip()
        while True:
            m = re.match(r"^([$\w]+):\s*(.*)$", piece)
            if not m:
                break
            out.append(("label", m.group(1)))
            piece = m.group(2).strip()
        if not piece or piece in ("{", "}") or piece.startswith("."):
            continue
        m = re.match(r"^(@!?%\w+\s+)?([\w.:]+)\s*(.*)$", piece)
        guard = m.group(1).strip() if m.group(1) else None
        ops = [o.strip() for o in re.split(r",(?![^(]*\))", m.group(3))] if m.group(3) else []
        out.append(("ins", guard, m.group(2), ops))
    return out


def run_ptx(text: str, params: dict, keys: tuple[int, ...], *, seed: int = 1,
            max_steps: int = 10_000, fma_result: int = 0, must_end: bool = True,
            callees: tuple[int, ...] | None = None):
    """Interpret a hand-written kernel (or its rewrite) with ``keys[i]`` in site i's marker
    global: the (site, slot 0, slot 1) of its marker fmas / calls in execution order (None
    for an fma with no key multiplicand). A call of ``callee<k>`` writes ``fma_result + k``,
    a marker fma of site i that for its callee (``callees[i]``, default i) ^ its key (so
    that the unblinding xor gives the call's result).
    A program still running after ``max_steps`` fails the test if ``must_end``, else
    gives None."""
    stmts = statements(text)
    labels = {s[1]: i for i, s in enumerate(stmts) if s[0] == "label"}
    rng = np.random.default_rng(seed)
    regs: dict[str, int] = {}
    out_params: dict[str, int] = {}
    calls: list = []

    def val(op):
        op = op.strip()
        if op.startswith("%"):
            if op not in regs:
                regs[op] = int(rng.integers(0, 2 ** 63)) | 1
            return regs[op]
        return int(op, 0) & MASK

    pc = 0
    for _ in range(max_steps):
        if pc >= len(stmts):
            return calls
        s = stmts[pc]
        pc += 1
        if s[0] == "label":
            continue
        _, guard, opcode, ops = s
        if guard is not None:
            g = val(guard.lstrip("@!"))
            if (not g) if not guard.startswith("@!") else g:
                continue
        base = opcode.split(".")[0]
        if base == "ret":
            return calls
        if base == "bra":
            pc = labels[ops[0]]
        elif base == "ld" and "param" in opcode:
            name = ops[1].strip("[]")
            regs[ops[0]] = (fma_result + calls[-1][0] if name.startswith("__splice_r")
                            else params[name])
        elif base == "ld":
            m = MARKER_RE.search(ops[1])
            assert m, ops
            regs[ops[0]] = keys[int(m.group(1))]
        elif base == "setp":
            a, b = val(ops[1]), val(ops[2])
            regs[ops[0]] = int({"eq": a == b, "ne": a != b, "lt": a < b}[opcode.split(".")[1]])
        elif base == "add":
            regs[ops[0]] = (val(ops[1]) + val(ops[2])) & MASK
        elif base == "mov":
            regs[ops[0]] = val(ops[1])
        elif base == "xor":
            regs[ops[0]] = val(ops[1]) ^ val(ops[2])
        elif base == "sub":
            regs[ops[0]] = (val(ops[1]) - val(ops[2])) & MASK
        elif base == "not":
            regs[ops[0]] = ~val(ops[1]) & MASK
        elif opcode == "neg.f64":   # LLVM's fneg: the sign bit flipped
            regs[ops[0]] = val(ops[1]) ^ (1 << 63)
        elif base == "fma":
            x, y, z = (val(o) for o in ops[1:])
            rec = None
            for i, k in enumerate(keys):
                if k in (x, y):
                    rec = (i, (x if y == k else y) ^ k, z ^ k)
                    break
            calls.append(rec)
            # the call's result blinded by its key, as the Tile IR unblinds it (xor K)
            regs[ops[0]] = (fma_result + (callees or range(len(keys)))[rec[0]]) ^ \
                keys[rec[0]] if rec else fma_result
        elif base == "st" and "param" in opcode:
            out_params[ops[0].strip("[]")] = val(ops[1])
        elif base == "call":
            callee = next(o for o in ops if o.startswith("callee"))
            calls.append((int(callee[len("callee"):]),) +
                         tuple(out_params[a.strip()] for a in ops[-1].strip("()").split(",")))
        elif base == "st":
            pass
        else:
            raise AssertionError(f"interpreter: unsupported {opcode}")
    assert not must_end, "does not terminate"
    return None


def hand_kernel(body: str, n_sites: int = 1) -> str:
    """An entry with two u64 parameters (%rd30, %rd31; %p1, %p2 say whether each is 0) and
    the marker globals of ``n_sites`` sites, around ``body``."""
    markers = "".join(f".visible .global .align 8 .b8 __splice_marker_{i}[8];\n"
                      for i in range(n_sites))
    return (HEADER + markers +
            ".visible .entry k(\n\t.param .u64 k_p0,\n\t.param .u64 k_p1\n)\n{\n"
            "\t.reg .pred %p<4>;\n\t.reg .b64 %rd<64>;\n"
            "\tld.param.u64 \t%rd30, [k_p0];\n\tld.param.u64 \t%rd31, [k_p1];\n"
            "\tsetp.eq.u64 \t%p1, %rd30, 0;\n\tsetp.eq.u64 \t%p2, %rd31, 0;\n"
            + body + "\tret;\n}\n")


def check_rewrite_semantics(src: str, sites=None):
    """Rewrite ``src`` (one fma site unless ``sites`` is given); unless the rewriter refuses
    (the report's ``refused``: the pipeline falls back to atomic markers), every call must take the
    slots the marker fmas had, on every path. Returns the rewritten PTX, or None if
    refused."""
    return _oracle(src, sites or fma_sites(1), ((0x5DEECE66D0A1B2C3,), (0x0123456789ABCDEF,)),
                   (0xDEAD,))


def check_two_sites(src: str, sites=None):
    """:func:`check_rewrite_semantics` for two fma sites with a key each (``sites``, default
    two calling different callees): every call must call the site's callee and take the
    slots its marker fma had. A marker fma writes a nonzero result here, and paths that
    depend on the keys, the garbage or do not end are skipped."""
    return _oracle(src, sites or fma_sites(2), ((0x5DEECE66D0A1B2C3, 0x31415926535897F1),
                                       (0x0123456789ABCDEF, 0x7777AAAA5555CCC3)),
                   (0xDEAD, 0xBEEF), max_steps=20_000, fma_result=0x4242, must_end=False,
                   same_garbage=True)


def _oracle(src, sites, keys, rewritten_keys, *, same_garbage=False, **run):
    """The original ``src`` run with ``keys[0]`` and ``keys[1]`` (and, if ``same_garbage``,
    another garbage seed) gives the markers' sites and slots on each path where they agree;
    the rewrite run with ``rewritten_keys`` and two garbage seeds must make the same calls."""
    report = splice_calls(Module(src), sites, kernel_name="k")
    if report.refused is not None:
        return None
    run = dict(run, callees=tuple(int(sites[i].callee[len("callee"):]) for i in sorted(sites)))
    out = report.ptx
    ka, kb = keys
    for p0 in (0, 1, 0x1234_5678_9ABC_DEF0):
        for p1 in (0, 1, 0x0FED_CBA9_8765_4321):
            params = {"k_p0": p0, "k_p1": p1}
            want = run_ptx(src, params, ka, **run)
            if want is None or None in want or want != run_ptx(src, params, kb, **run) or \
                    same_garbage and want != run_ptx(src, params, ka, seed=2, **run):
                continue   # slots depend on the key or the garbage: not a marker program here
            # the rewrite's calls name their callee (callee<k>): sites with one callee make
            # the same call
            want = [(int(sites[c[0]].callee[len("callee"):]),) + c[1:] for c in want]
            for seed in (1, 2):
                got = run_ptx(out, params, rewritten_keys, seed=seed, **run)
                assert got == want, (f"params {params}: calls take {got}, the marker fmas had "
                                     f"{want}\n{out}")
    return out
