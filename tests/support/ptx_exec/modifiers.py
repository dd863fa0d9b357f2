"""The instruction modifiers the executor models, per opcode: any other is refused when the
instruction runs (an :class:`~.memory.ExecError` naming it), never ignored, so that a new
spelling in tileiras's or NVRTC's PTX is an error rather than a silently wrong value.
Type modifiers (``.f32``, ``.b64``...) are the handlers' own business (:mod:`.ops`).

A modifier is here because :mod:`.ops` implements what it means, or because it changes
nothing the executor can observe, each group said why: memory order and scope (one CTA
runs at a time and every access is seen at once by every thread, the strongest order),
cache and eviction hints (no caches), ``.uni`` (a promise about convergence the executor
does not rely on), ``.aligned`` and ``.sync`` (the executor resolves warp-wide and CTA-wide
instructions only when their lanes arrive, :mod:`.machine`).
"""

from __future__ import annotations

ROUNDING = frozenset({"rn", "rz", "rm", "rp"})
INT_ROUNDING = frozenset({"rni", "rzi", "rmi", "rpi"})
SPACES = frozenset({"global", "shared", "shared::cta", "local", "param", "const"})
VECTORS = frozenset({"v2", "v4", "v8"})
#: memory order and scope: satisfied by sequential execution within one CTA
ORDER = frozenset({"relaxed", "acquire", "release", "acq_rel", "sc", "volatile", "weak",
                   "cta", "gpu", "sys", "cluster"})
#: cache operators and eviction or allocation hints (``.L2::cache_hint`` takes a policy
#: operand, which the handlers do not read)
CACHE = frozenset({"ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc",
                   "L1::evict_normal", "L1::evict_unchanged", "L1::evict_first",
                   "L1::evict_last", "L1::no_allocate", "L2::evict_normal",
                   "L2::evict_first", "L2::evict_last", "L2::cache_hint", "L2::64B",
                   "L2::128B", "L2::256B"})
COMPARE = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu",
                     "ltu", "leu", "gtu", "geu", "num", "nan"})
BOOL = frozenset({"and", "or", "xor"})
ATOMIC_OPS = frozenset({"add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas"})

_ARITH = ROUNDING | {"ftz", "sat", "cc"}
_APPROX = frozenset({"approx", "ftz"})
_MEMORY = SPACES | VECTORS | ORDER | CACHE

KNOWN: dict[str, frozenset[str]] = {
    "add": _ARITH, "sub": _ARITH, "addc": frozenset({"cc"}), "subc": frozenset({"cc"}),
    "mul": ROUNDING | {"ftz", "sat", "hi", "lo", "wide"},
    "mad": ROUNDING | {"ftz", "sat", "hi", "lo", "wide", "cc"},
    "madc": frozenset({"hi", "lo", "cc"}),
    "mul24": frozenset({"hi", "lo"}), "mad24": frozenset({"hi", "lo"}),
    "div": ROUNDING | {"approx", "full", "ftz"},
    "rem": frozenset(), "sad": frozenset(),
    "abs": frozenset({"ftz"}), "neg": frozenset({"ftz"}),
    "min": frozenset({"ftz", "NaN", "relu"}), "max": frozenset({"ftz", "NaN", "relu"}),
    "popc": frozenset(), "clz": frozenset(), "brev": frozenset(),
    "bfind": frozenset({"shiftamt"}), "bfe": frozenset(), "bfi": frozenset(),
    "bmsk": frozenset({"clamp", "wrap"}), "szext": frozenset({"clamp", "wrap"}),
    "dp4a": frozenset({"lo", "hi"}), "dp2a": frozenset({"lo", "hi"}),
    "and": frozenset(), "or": frozenset(), "xor": frozenset(), "not": frozenset(),
    "cnot": frozenset(), "lop3": frozenset(),
    "shl": frozenset(), "shr": frozenset(), "shf": frozenset({"l", "r", "clamp", "wrap"}),
    "prmt": frozenset({"f4e", "b4e", "rc8", "ecl", "ecr", "rc16"}),
    "selp": frozenset(), "slct": frozenset(),
    "setp": COMPARE | BOOL | {"ftz"}, "set": COMPARE | BOOL | {"ftz"},
    "testp": frozenset({"finite", "infinite", "number", "notanumber", "normal", "subnormal"}),
    "copysign": frozenset(), "mov": frozenset(),
    "cvt": ROUNDING | INT_ROUNDING | {"rna", "ftz", "sat", "satfinite", "relu"},
    "cvta": SPACES | {"to"},
    "isspacep": SPACES | {"shared::cluster"},
    "fma": ROUNDING | {"ftz", "sat", "relu"},
    "rcp": ROUNDING | _APPROX, "sqrt": ROUNDING | _APPROX,
    "rsqrt": _APPROX, "ex2": _APPROX, "lg2": _APPROX, "sin": _APPROX, "cos": _APPROX,
    "tanh": _APPROX,
    "ld": _MEMORY, "ldu": _MEMORY, "st": _MEMORY,
    "prefetch": frozenset({"global", "local", "L1", "L2", "L2::evict_last",
                           "L2::evict_normal"}),
    "prefetchu": frozenset({"L1"}),
    "membar": frozenset({"cta", "gl", "sys"}),
    "fence": frozenset({"sc", "acq_rel", "acquire", "release", "cta", "gpu", "sys",
                        "cluster"}),
    "nanosleep": frozenset(), "pmevent": frozenset({"mask"}),
    "discard": frozenset({"global", "L2"}),
    "applypriority": frozenset({"global", "L2::evict_normal"}),
    "griddepcontrol": frozenset({"launch_dependents", "wait"}),
    "createpolicy": frozenset({"fractional", "range", "L2::evict_last", "L2::evict_normal",
                               "L2::evict_first", "L2::evict_unchanged"}),
    "atom": ATOMIC_OPS | SPACES | ORDER, "red": ATOMIC_OPS | SPACES | ORDER,
    "bra": frozenset({"uni"}), "brx": frozenset({"idx", "uni"}), "call": frozenset({"uni"}),
    "ret": frozenset({"uni"}), "exit": frozenset(), "trap": frozenset(),
    "brkpt": frozenset(),
    "bar": frozenset({"sync", "arrive", "red", "popc", "and", "or", "cta", "aligned",
                      "warp"}),
    "barrier": frozenset({"sync", "arrive", "red", "popc", "and", "or", "cta", "aligned"}),
    "shfl": frozenset({"sync", "up", "down", "bfly", "idx"}),
    "vote": frozenset({"sync", "all", "any", "uni", "ballot"}),
    "match": frozenset({"sync", "any", "all"}),
    "redux": frozenset({"sync"}) | BOOL | {"add", "min", "max"},
    "activemask": frozenset(), "elect": frozenset({"sync"}),
    "ldmatrix": frozenset({"sync", "aligned", "m8n8", "x1", "x2", "x4", "trans", "shared",
                           "shared::cta"}),
    "stmatrix": frozenset({"sync", "aligned", "m8n8", "x1", "x2", "x4", "trans", "shared",
                           "shared::cta"}),
    "mma": frozenset({"sync", "aligned", "m16n8k16", "m16n8k8", "row", "col"}),
    "cp": frozenset({"async", "ca", "cg", "shared", "shared::cta", "global", "commit_group",
                     "wait_group", "wait_all", "L2::cache_hint", "L2::64B", "L2::128B",
                     "L2::256B"}),
}


def unknown(base: str, modifiers, types) -> list[str]:
    """The modifiers of an instruction ``base.<modifiers>`` that are neither a type (in
    ``types``) nor in :data:`KNOWN` for ``base``."""
    known = KNOWN.get(base, frozenset())
    return [m for m in modifiers if m not in types and m not in known]
