"""Warpgroup call sites in each group position of a warp-specialised block, on the CPU
executor.

The executor cannot run tileiras's warp-specialised kernels (TMA, ``wgmma``, ``mbarrier``,
``setmaxnreg``), so a group that does not start at thread 0 is made from a kernel that is
not warp-specialised: :func:`warp_specialise` gives tileiras's PTX of a 128-thread kernel
(the group is the block) the shape tileiras gives its epilogue warpgroup -- a 256-thread
block whose warp id (read with ``shfl.sync.idx``) lets one warpgroup into the kernel's code,
``tid.x - first`` for ``tid.x``, the group's named barrier for ``bar.sync 0`` -- and
:func:`compile_in_group` runs splice's whole pipeline (its proof, fragments, staging and
call sequences) on that PTX in place of tileiras's.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

GROUP = 128
BLOCK = 256
#: The named barrier tileiras joins its epilogue warpgroup at (its id 1 in the matmuls).
GROUP_BARRIER = 1
_END = "$L__splice_test_other_group"


def warp_specialise(ptx: str, first: int) -> str:
    """``ptx`` (tileiras's PTX of a 128-thread kernel) as a 256-thread block whose warpgroup
    at threads ``first``..``first`` + 127 runs the kernel and whose other warpgroup goes
    straight to the kernel's ``ret``.

    Raises:
        ValueError: ``ptx`` is not one entry of 128 threads that returns once.
    """
    if first not in (0, GROUP):
        raise ValueError(f"a warpgroup starts at thread 0 or {GROUP}, not {first}")
    lines = ptx.split("\n")
    head = next(i for i, line in enumerate(lines) if line.strip() == ".reqntid 128")
    lines[head] = lines[head].replace("128", str(BLOCK))
    opening = lines.index("{", head)
    body = opening + 1
    while re.match(r"\s*(\.reg|\.shared|\.local|\.loc|//|$)", lines[body]):
        body += 1
    rets = [i for i, line in enumerate(lines) if line.strip() == "ret;"]
    if len(rets) != 1:
        raise ValueError(f"the kernel returns at {len(rets)} places, not 1")
    out = lines[:body] + _warp_branch(first) + lines[body:rets[0]] + [f"{_END}:"] + \
        lines[rets[0]:]
    text = "\n".join(out)
    text, bars = re.subn(r"\bbar\.sync \t0;", f"barrier.sync \t{GROUP_BARRIER}, {GROUP};",
                         text)
    reads = itertools.count()
    text, tids = re.subn(r"mov\.u32 \t(%r\d+), %tid\.x;",
                         lambda m: _rank(m.group(1), first, next(reads)), text)
    if not bars or not tids:
        raise ValueError(f"the kernel has {bars} bar.sync 0 and {tids} tid.x reads")
    return text


def _warp_branch(first: int) -> list[str]:
    """tileiras's entry into one warpgroup's code: the warp id, uniform in the warp (a
    shuffle from lane 0), its group, a branch around the code of the others."""
    return ["\t.reg .b32 \t%splice_test_w<4>;", "\t.reg .b32 \t%splice_test_t<64>;",
            "\t.reg .pred \t%splice_test_p;",
            "\tmov.u32 \t%splice_test_w0, %tid.x;",
            "\tshr.u32 \t%splice_test_w1, %splice_test_w0, 5;",
            "\tshfl.sync.idx.b32 \t%splice_test_w2, %splice_test_w1, 0, 31, -1;",
            "\tand.b32 \t%splice_test_w3, %splice_test_w2, -4;",
            f"\tsetp.ne.b32 \t%splice_test_p, %splice_test_w3, {first // 32};",
            f"\t@%splice_test_p bra \t{_END};"]


def _rank(reg: str, first: int, k: int) -> str:
    """``reg`` = the thread's rank in its group, as tileiras computes it in its epilogue
    warpgroup (``tid.x - 128``; the ``k``-th read of ``tid.x``)."""
    if first == 0:
        return f"mov.u32 \t{reg}, %tid.x;"
    return (f"mov.u32 \t%splice_test_t{k}, %tid.x;\n"
            f"\tadd.s32 \t{reg}, %splice_test_t{k}, -{first};")


def compile_in_group(kernel, signature, first: int, monkeypatch, arch: str = "sm_90"):
    """``splice.compile(kernel, signature, arch)`` with tileiras's PTX made
    :func:`warp_specialise`'s 256-thread block (group at ``first``). Use with a fresh cache
    (the ``fresh_cache`` fixture): the build is cached under the kernel's own key."""
    import splice
    from splice.system import toolchain
    real = toolchain.run_tileiras

    def tileiras(*args, **kw):
        capture = real(*args, **kw)
        return dataclasses.replace(capture, ptx=warp_specialise(capture.ptx, first))
    monkeypatch.setattr(toolchain, "run_tileiras", tileiras)
    build = splice.compile(kernel, signature, arch)
    if f".reqntid {BLOCK}" not in build.spliced_ptx:
        raise AssertionError("the build did not come from the warp-specialised PTX")
    return build


def read_at_join(ptx: str, kind: str, param: int, first: int = 0) -> str:
    """``ptx`` (a build's spliced PTX with one ``kind`` call: "block" or "warpgroup") with
    code at the call's join, where tileiras's scheduler may place some before its own
    barrier: each thread reads word ``ctaid.x * 128 + (rank + 1) % 128`` of the array that
    is kernel parameter ``param`` -- the word its neighbour in the group wrote in the callee,
    ordered before the read only by the barrier splice puts after the call (the executor
    refuses the read as a race without it)."""
    end = ptx.index(f"}} // splice: end {kind} call")
    join = re.findall(r"@%__splice_q bra \t(\$L__\w+);", ptx[:end])[-1]
    m = re.search(rf"\.param \.u64 [^,\n]*?(\w+_param_{param})\b", ptx)
    if m is None or ptx.count(f"{join}:\n") != 1:
        raise ValueError(f"no parameter {param} or no single join label {join}")
    read = (f"{join}:\n\t{{ .reg .b64 %__o, %__a; .reg .b32 %__t, %__c, %__v;\n"
            f"\tld.param.b64 \t%__o, [{m.group(1)}];\n\tmov.u32 \t%__t, %tid.x;\n"
            f"\tsub.u32 \t%__t, %__t, {first};\n"
            "\tadd.u32 \t%__t, %__t, 1;\n\tand.b32 \t%__t, %__t, 127;\n"
            "\tmov.u32 \t%__c, %ctaid.x;\n\tmad.lo.u32 \t%__t, %__c, 128, %__t;\n"
            "\tmul.wide.u32 \t%__a, %__t, 4;\n\tadd.s64 \t%__o, %__o, %__a;\n"
            "\tld.global.b32 \t%__v, [%__o];\n\t}\n")
    return ptx.replace(f"{join}:\n", read)
