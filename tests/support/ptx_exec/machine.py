"""Threads, CTAs and launches: each thread runs its decoded blocks until it must wait (a
barrier, a warp collective), exits or traps; when no thread of the CTA can run, the
barriers whose counts are reached and the collectives whose lanes have all arrived are
resolved, and the threads they release run on. When nothing can be resolved the CTA is
deadlocked: an :class:`ExecError` that says who waits where.

Barrier semantics (PTX ISA 9.x, ``bar``/``barrier``): ``bar.sync a`` waits for every
non-exited thread of the CTA, ``bar.sync a, b`` for ``b`` threads (``bar.arrive`` counts
without waiting); ``bar.red`` also reduces a predicate over them. Warp collectives
(``shfl.sync``, ``vote.sync``, ``match.sync``, ``redux.sync``, ``bar.warp.sync``,
``elect.sync``) wait for every non-exited lane of their member mask, each with the same
instruction and mask; ``activemask`` resolves when no lane of the warp can run, to the lanes
waiting at the same ``activemask`` (the largest set of lanes a GPU could have converged).
"""

from __future__ import annotations

import math

from . import values as V
from .decode import Func, Program
from .memory import ExecError, GlobalMemory, LocalMemory, Shadow, SharedMemory

RUN, WAIT, EXIT = 0, 1, 2
MAX_BLOCKS_PER_THREAD = 20_000_000


class Launch:
    """One launch: its memory, grid and block, parameter buffer and variables.

    Attributes:
        approx: approximate instructions executed: ``"ex2.f32"`` -> count (their bounds are
            in :data:`.runtime.APPROX_BOUNDS`).
        approx_mode: ``"exact"`` (an approximate instruction returns the exact function,
            rounded) or ``"bound"`` (off by its whole documented error, up or down).
        unrounded: f32/f64 ``add``/``sub``/``mul`` without a rounding modifier executed
            (each rounded here; ptxas may contract a mul and an add of them into an fma, so
            a GPU's result can differ in the last place).
        blocks_run: basic blocks executed, all threads together.
    """

    def __init__(self, prog: Program, kernel: str, grid, block, params: bytes,
                 memory: GlobalMemory, dynamic_smem: int = 0, approx_mode: str = "exact"):
        self.prog = prog
        self.approx_mode = approx_mode
        self.kernel = kernel
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.block = tuple(block) + (1,) * (3 - len(block))
        self.G = memory
        self.kparams = memory.alloc(params, f"the parameters of {kernel}", 16)
        self.sym: dict[str, int] = {}
        for v in prog.vars.values():
            if v.space in (".global", ".const") and not v.extern:
                self.sym[v.name] = memory.alloc(v.init or v.size, f"variable {v.name}",
                                                max(v.align, 16))
        self.dynamic_smem = dynamic_smem
        self.approx: dict[str, int] = {}
        self.unrounded = 0
        self.blocks_run = 0
        self._clock = 0

    def run(self) -> Launch:
        gx, gy, gz = self.grid
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    CTA(self, (x, y, z)).run()
        return self


class CTA:
    def __init__(self, launch: Launch, ctaid):
        self.L = launch
        self.ctaid = ctaid
        self.ntid = launch.block
        bx, by, bz = launch.block
        n = bx * by * bz
        self.nwarps = (n + 31) // 32
        self.smem_size = launch.prog.static_shared + launch.dynamic_smem
        self.S = SharedMemory(self.smem_size)
        self.gshadow = Shadow("global")
        self.threads = [Thread(self, i, (i % bx, i // bx % by, i // (bx * by)))
                        for i in range(n)]
        self.arrived: dict[int, int] = {}

    def run(self) -> None:
        entry = self.L.prog.func(self.L.kernel)
        for t in self.threads:
            t.enter(entry, ())
        while True:
            for t in self.threads:
                if t.state == RUN:
                    t.run()
            if all(t.state == EXIT for t in self.threads):
                return
            if not (self._barriers() or self._collectives()):
                raise ExecError(self._deadlock())

    def arrive(self, t, bar: int, count) -> None:
        self.arrived[bar] = self.arrived.get(bar, 0) + 1

    # -- barriers
    def _barriers(self) -> bool:
        waiting: dict[int, list[Thread]] = {}
        for t in self.threads:
            if t.state == WAIT and t.ev[0] == "bar":
                waiting.setdefault(t.ev[2], []).append(t)
        live = sum(t.state != EXIT for t in self.threads)
        released = False
        for bar, ts in waiting.items():
            ts.sort(key=lambda t: t.arrival)
            count = ts[0].ev[3]
            expected = live if count is None else count
            if count is not None and count % 32:
                raise ExecError(f"bar {bar}, {count}: a thread count not a multiple of 32")
            if len(ts) + self.arrived.get(bar, 0) < expected:
                continue
            group = ts[:max(expected - self.arrived.get(bar, 0), 0)] if count is not None \
                else ts
            self.arrived[bar] = 0
            self._check_converged(bar, group)
            self._release_barrier(group)
            released = True
        return released

    def _check_converged(self, bar: int, group: list[Thread]) -> None:
        """An ``.aligned`` barrier (every ``bar``) must be executed by all non-exited
        threads of each warp at the same instruction: "in conditionally executed code, an
        aligned bar instruction should only be used if it is known that all threads evaluate
        the condition identically (the warp does not diverge)", otherwise the behaviour is
        undefined (PTX ISA, "Parallel Synchronization and Communication Instructions: bar,
        barrier", 9.7.12.1 in ISA 8.x). A warp whose lanes wait at two instructions, or
        some of whose lanes are elsewhere, is an error."""
        aligned = [t for t in group if t.ev[6]]
        for w in sorted({t.warp for t in aligned}):
            lanes = [u for u in self.threads[32 * w:32 * w + 32] if u.state != EXIT]
            places = {}
            for u in lanes:
                at = (u.func.name, u.pc) if u.state == WAIT and u.ev[0] == "bar" and \
                    u.ev[2] == bar and u in group else None
                places.setdefault(at, []).append(u.lane)
            if len(places) > 1:
                where = "; ".join(
                    f"lanes {_lanes(ls)} "
                    + (f"at {at[0]}, PTX {self.threads[32 * w + ls[0]].ev[7]}"
                       if at else "elsewhere (not at this barrier)")
                    for at, ls in places.items())
                raise ExecError(
                    f"barrier {bar} (.aligned) in CTA {self.ctaid} reached by warp {w} "
                    f"diverged: {where}. Undefined behaviour (PTX ISA, \"bar, barrier\": an "
                    f"aligned barrier must be executed by every non-exited thread of the "
                    f"warp at the same instruction); use barrier.sync without .aligned, or "
                    f"reconverge the warp first")

    def _release_barrier(self, group: list[Thread]) -> None:
        kind = group[0].ev[1]
        preds = [t.ev[4] for t in group]
        result = None
        if kind == "popc":
            result = sum(1 for p in preds if p)
        elif kind == "and":
            result = 1 if all(preds) else 0
        elif kind == "or":
            result = 1 if any(preds) else 0
        for t in group:
            if result is not None:
                t.regs[t.ev[5]] = result
            t.cta_epoch += 1
            t.warp_epoch += 1
            t.state = RUN
            t.ev = None

    # -- warp collectives
    def _collectives(self) -> bool:
        released = False
        for w in range(self.nwarps):
            lanes = self.threads[32 * w:32 * w + 32]
            waiting = [t for t in lanes if t.state == WAIT and t.ev[0] == "warp"]
            if not waiting:
                continue
            done: set[int] = set()
            for t in waiting:
                if t.linear in done or t.state != WAIT:
                    continue
                group = self._group(t, lanes)
                if group is None:
                    continue
                self._resolve(group, lanes)
                done.update(g.linear for g in group)
                released = True
        return released

    def _group(self, t: Thread, lanes) -> list[Thread] | None:
        name, members = t.ev[1], t.ev[2]
        if name == "activemask":
            if any(u.state == RUN for u in lanes):
                return None
            if any(u.state == WAIT and u.ev[0] == "warp" and u.ev[1] != "activemask"
                   for u in lanes) and self._other_collective_can_resolve(lanes):
                return None
            return [u for u in lanes if u.state == WAIT and u.ev[1] == "activemask"
                    and u.ev[0] == "warp" and u.blocks is t.blocks and u.pc == t.pc]
        if not (members >> t.lane) & 1:
            raise ExecError(f"{name}: thread {t.linear} (lane {t.lane}) executes it with a "
                            f"member mask {members:#010x} that does not include it")
        group = []
        for u in lanes:
            if not (members >> u.lane) & 1 or u.state == EXIT:
                continue
            if u.state != WAIT or u.ev[0] != "warp" or u.ev[1] != name or u.ev[2] != members:
                return None
            group.append(u)
        return group

    def _other_collective_can_resolve(self, lanes) -> bool:
        for u in lanes:
            if u.state == WAIT and u.ev[0] == "warp" and u.ev[1] != "activemask":
                try:
                    if self._group(u, lanes) is not None:
                        return True
                except ExecError:
                    return False
        return False

    def _resolve(self, group: list[Thread], lanes) -> None:
        name = group[0].ev[1]
        members = group[0].ev[2]
        by_lane = {u.lane: u for u in group}
        results: dict[int, tuple] = {}
        if name.startswith("shfl."):
            mode = name[5:]
            for u in group:
                a, b, c = u.ev[3]
                results[u.lane] = self._shfl(u, mode, b, c, by_lane, members)
        elif name.startswith("vote."):
            preds = {u.lane: u.ev[3] for u in group}
            mode = name[5:]
            ballot = sum(1 << ln for ln, p in preds.items() if p)
            val = {"all": int(all(preds.values())), "any": int(any(preds.values())),
                   "uni": int(len(set(preds.values())) == 1), "ballot": ballot}[mode]
            for u in group:
                results[u.lane] = (val,)
        elif name.startswith("match."):
            vals = {u.lane: u.ev[3] for u in group}
            if name == "match.any":
                for u in group:
                    results[u.lane] = (sum(1 << ln for ln, v in vals.items()
                                           if v == vals[u.lane]),)
            else:
                same = len(set(vals.values())) == 1
                m = sum(1 << ln for ln in vals) if same else 0
                for u in group:
                    results[u.lane] = (m, int(same))
        elif name.startswith("redux."):
            _, op, kind = name.split(".")
            vals = [u.ev[3] for u in group]
            if kind == "s":
                vals = [v - (1 << 32) if v >> 31 else v for v in vals]
            acc = vals[0]
            for v in vals[1:]:
                acc = {"add": acc + v, "min": min(acc, v), "max": max(acc, v), "and": acc & v,
                       "or": acc | v, "xor": acc ^ v}[op]
            for u in group:
                results[u.lane] = (acc & 0xffffffff,)
        elif name == "activemask":
            m = sum(1 << u.lane for u in group)
            for u in group:
                results[u.lane] = (m,)
        elif name == "elect":
            leader = min(u.lane for u in group)
            for u in group:
                results[u.lane] = (leader, int(u.lane == leader))
        elif name.startswith("mma."):
            results = self._mma(name, group, by_lane)
        elif name.startswith(("ldmatrix.", "stmatrix.")):
            results = self._matrix(name, group, by_lane)
        elif name == "bar.warp.sync":
            pass
        else:
            raise ExecError(f"unknown collective {name}")
        for u in group:
            for slot, v in zip(u.ev[4], results.get(u.lane, ())):
                if slot >= 0:
                    u.regs[slot] = v
            if name == "bar.warp.sync":     # the one warp collective that orders memory
                u.warp_epoch += 1
            u.state = RUN
            u.ev = None

    def _matrix(self, name: str, group, by_lane) -> dict[int, tuple]:
        """ldmatrix / stmatrix of m8n8 .b16 matrices (PTX ISA, "Warp-level matrix load
        instruction: ldmatrix"): element (r, c) of matrix j is at the row address lane
        8j + r gives, + 2c; lane i holds (i/4, 2(i%4)) and (i/4, 2(i%4) + 1), transposed
        with ``.trans``."""
        op, num, trans = name.split(".")
        if len(group) != 32:
            raise ExecError(f"{op}: {32 - len(group)} lanes of warp {group[0].warp} exited "
                            f"before this warp-wide instruction")
        S = self.S
        out: dict[int, tuple] = {}
        for i in range(32):
            r, c = i // 4, 2 * (i % 4)
            elems = [(c, r), (c + 1, r)] if trans == "True" else [(r, c), (r, c + 1)]
            regs = []
            for j in range(int(num)):
                vals = by_lane[i].ev[3][1][j] if op == "stmatrix" else 0
                word = 0
                for k, (row, col) in enumerate(elems):
                    src = by_lane[8 * j + row]
                    base = src.ev[3][0] if op == "stmatrix" else src.ev[3]
                    if op == "ldmatrix":
                        word |= S.read(base + 2 * col, 2, src) << (16 * k)
                    else:
                        S.write(base + 2 * col, 2, vals >> (16 * k), by_lane[i])
                regs.append(word)
            out[i] = tuple(regs) if op == "ldmatrix" else ()
        return out

    def _mma(self, name: str, group, by_lane) -> dict[int, tuple]:
        """mma.sync m16n8k{8,16}, f16/bf16 inputs, f32 accumulators (PTX ISA, "Matrix
        Fragments for mma.m16n8k16 with floating point type"): lane i (group g = i/4, t = i%4)
        holds A[g (+8)][2t + (0, 1) (+8)], B[2t + (0, 1) (+8)][g] and C[g (+8)][2t + (0, 1)],
        two 16-bit elements per register, the lower index in the low half. The dot products
        are exact (float64 sums of exact products, then rounded once): the GPU's order and
        rounding of the sum are not specified, so the launch counts it as approximate."""
        _, shape, ty = name.split(".")
        k = 16 if shape == "m16n8k16" else 8
        if len(group) != 32:
            raise ExecError(f"mma.sync: {32 - len(group)} lanes of warp {group[0].warp} exited")
        half = (lambda b: V.b2h(b)) if ty == "f16" else V.bf2f
        A = [[0.0] * k for _ in range(16)]
        B = [[0.0] * 8 for _ in range(k)]
        C = [[0.0] * 8 for _ in range(16)]
        for i in range(32):
            g, t = i // 4, i % 4
            a, b, c = by_lane[i].ev[3]
            elems = [(r >> (16 * h)) & 0xffff for r in a for h in (0, 1)]
            for j, e in enumerate(elems):
                row = g + 8 * ((j >> 1) & 1)
                col = 2 * t + (j & 1) + 8 * (j >> 2)
                A[row][col] = half(e)
            for j, e in enumerate((r >> (16 * h)) & 0xffff for r in b for h in (0, 1)):
                B[2 * t + (j & 1) + 8 * (j >> 1)][g] = half(e)
            for j, v in enumerate(c):
                C[g + 8 * (j >> 1)][2 * t + (j & 1)] = V.b2f(v)
        self.L.approx["mma.f32"] = self.L.approx.get("mma.f32", 0) + 1
        out: dict[int, tuple] = {}
        for i in range(32):
            g, t = i // 4, i % 4
            d = []
            for j in range(4):
                row, col = g + 8 * (j >> 1), 2 * t + (j & 1)
                acc = math.fsum([A[row][x] * B[x][col] for x in range(k)] + [C[row][col]])
                d.append(V.f2b(acc))
            out[i] = tuple(d)
        return out

    @staticmethod
    def _shfl(u, mode, b, c, by_lane, members) -> tuple[int, int]:
        lane = u.lane
        bval, cval, segmask = b & 31, c & 31, (c >> 8) & 31
        max_lane = (lane & segmask) | (cval & ~segmask & 31)
        min_lane = lane & segmask
        if mode == "up":
            j = lane - bval
            ok = j >= max_lane
        elif mode == "down":
            j = lane + bval
            ok = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bval
            ok = j <= max_lane
        else:
            j = min_lane | (bval & ~segmask & 31)
            ok = j <= max_lane
        if not ok:
            j = lane
        src = by_lane.get(j)
        if src is None:
            raise ExecError(f"shfl.sync.{mode}: lane {lane} reads lane {j}, which is not in "
                            f"the member mask {members:#010x} or has exited")
        return src.ev[3][0], int(ok)

    def _deadlock(self) -> str:
        lines = []
        for t in self.threads:
            if t.state == WAIT:
                ev = t.ev
                what = f"barrier {ev[2]}" + (f" (count {ev[3]})" if ev[3] is not None else "") \
                    if ev[0] == "bar" else f"{ev[1]} mask {ev[2]!r}"
                lines.append(f"thread {t.linear} waits at {what} in {t.func.name}, "
                             f"{t.func.source[t.pc - 1] if t.pc else ''}")
        exited = sum(t.state == EXIT for t in self.threads)
        shown = "\n  ".join(lines[:8]) + ("\n  ..." if len(lines) > 8 else "")
        return (f"deadlock in CTA {self.ctaid}: {len(lines)} threads wait and can never be "
                f"released ({exited} have exited):\n  {shown}")


def _lanes(ls: list[int]) -> str:
    return f"{ls[0]}-{ls[-1]}" if ls == list(range(ls[0], ls[-1] + 1)) and len(ls) > 1 \
        else ",".join(map(str, ls))


class Thread:
    """One thread: its frames (registers, function, resume point), local memory and the
    event it waits for."""

    def __init__(self, cta: CTA, linear: int, tid):
        self.cta = cta
        self.L = cta.L
        self.G = cta.L.G
        self.kparams = cta.L.kparams
        self.sym = cta.L.sym
        self.linear = linear
        self.tid = tid
        self.lane = linear % 32
        self.warp = linear // 32
        self.Lm = LocalMemory()
        self.stack: list[tuple] = []
        self.cc = 0
        self.ev = None
        self.state = RUN
        self.cta_epoch = 0
        self.warp_epoch = 0
        self.arrival = 0
        self.blocks: list = []
        self.regs: list = []
        self.func: Func
        self.pc = 0
        self.local_base = 0
        self.rets: tuple = ()

    def clock(self) -> int:
        self.L._clock += 1
        return self.L._clock

    def enter(self, fn: Func, args) -> None:
        regs: list = list(fn.init)
        if len(args) != len(fn.params):
            raise ExecError(f"call of {fn.name} with {len(args)} arguments; it has "
                            f"{len(fn.params)} parameters")
        for (slot, size), arg in zip(fn.params, args):
            b = bytearray(size)
            n = min(size, len(arg))
            b[:n] = arg[:n]
            regs[slot] = b
        for slot, size in fn.results:
            regs[slot] = bytearray(size)
        for slot, size in fn.buffers:
            regs[slot] = bytearray(size)
        self.local_base = self.Lm.top
        for slot, size, align in fn.depots:
            regs[slot] = self.Lm.push(size, align)
        self.func = fn
        self.blocks = fn.blocks
        self.regs = regs
        self.pc = 0

    def call(self, name: str, args, rets) -> int:
        prog = self.L.prog
        fn = prog.module.functions.get(name)
        if fn is not None and not fn.is_definition:
            return self._builtin(name, args, rets)
        callee = prog.func(name)
        self.stack.append((self.func, self.blocks, self.regs, self.pc, rets, self.local_base))
        self.enter(callee, args)
        return -2

    def _builtin(self, name, args, rets) -> int:
        if name == "vprintf":
            for slot in rets:
                self.regs[slot][:] = bytes(len(self.regs[slot]))
            return self.pc
        if name == "__assertfail":
            raise ExecError(f"device-side assert (__assertfail) in thread {self.linear} of "
                            f"CTA {self.cta.ctaid}: {self._c_string(args[0])}")
        raise ExecError(f"call of external function {name!r}, which the executor does not "
                        f"provide")

    def _c_string(self, arg) -> str:
        """The NUL-terminated string at the generic address ``arg`` (a parameter's bytes),
        as ``__assertfail`` prints its message."""
        from .runtime import GREAD
        addr, out = int.from_bytes(bytes(arg[:8]), "little"), bytearray()
        while len(out) < 4096 and (b := GREAD(self, addr + len(out), 1)):
            out.append(b)
        return out.decode(errors="replace")

    def ret(self) -> int:
        if not self.stack:
            return -3
        fn = self.func
        callee_regs = self.regs
        self.Lm.pop(self.local_base)
        func, blocks, regs, pc, rets, local_base = self.stack.pop()
        for slot, (rslot, size) in zip(rets, fn.results):
            dst = regs[slot]
            src = callee_regs[rslot]
            n = min(len(dst), size)
            dst[:n] = src[:n]
        self.func, self.blocks, self.regs, self.pc, self.local_base = \
            func, blocks, regs, pc, local_base
        return -2

    def exit(self) -> int:
        return -3

    def trap(self, where: str) -> None:
        raise ExecError(f"trap in thread {self.linear} of CTA {self.cta.ctaid} "
                        f"({self.func.name}, PTX {where})")

    def run(self) -> None:
        blocks, r, pc = self.blocks, self.regs, self.pc
        n = 0
        try:
            while True:
                n += 1
                pc = blocks[pc](r, self)
                if pc >= 0:
                    continue
                if pc == -2:
                    blocks, r, pc = self.blocks, self.regs, self.pc
                    if pc >= 0 and n < MAX_BLOCKS_PER_THREAD:
                        continue
                if pc == -1:
                    self.state = WAIT
                    self.arrival = self.L.blocks_run + n
                    break
                if pc == -3:
                    self.state = EXIT
                    break
                if n >= MAX_BLOCKS_PER_THREAD:
                    raise ExecError(f"thread {self.linear} ran {n} blocks without finishing")
        except ExecError:
            raise
        except Exception as e:    # a bug of the executed code, or of the executor
            self.pc = pc
            raise ExecError(f"thread {self.linear} of CTA {self.cta.ctaid} failed in "
                            f"{self.func.name}, at or after PTX "
                            f"{self.func.source[pc] if 0 <= pc < len(self.func.source) else pc}:"
                            f" {type(e).__name__}: {e}") from e
        finally:
            self.L.blocks_run += n
