"""The toolchain sets splice is tested on, and which set is installed.

``python -m splice doctor`` prints :func:`installed` and :func:`assess`. The tested sets are the
ones CI runs the whole suite on (a venv per toolkit, ``.ci/run``) and the H200 runs its GPU tests
on; ``docs/compatibility.md`` lists them with the drivers and GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .system.toolchain import cuda_release as release

#: CUDA toolkit minors (tileiras, ptxas, NVRTC, nvJitLink, nvdisasm all of one minor) tested.
TESTED_TOOLKITS: tuple[tuple[int, int], ...] = ((13, 4), (13, 5))
#: cuda-tile minors tested (splice uses cuTile internals: ``splice/system/_cutile.py``).
TESTED_CUTILE: tuple[tuple[int, int], ...] = ((1, 7),)
#: The components that must share one toolkit minor.
TOOLKIT_PARTS = ("tileiras", "ptxas", "NVRTC", "nvJitLink", "nvdisasm")


@dataclass(frozen=True)
class Component:
    """One installed component.

    Attributes:
        name: ``"cuda-tile"``, ``"tileiras"``, ``"ptxas"``, ``"NVRTC"``, ``"nvJitLink"``,
            ``"nvdisasm"`` or ``"CCCL"``.
        version: (major, minor), or None where it is missing or its version unreadable.
        detail: the full version text, or why it is missing.
    """
    name: str
    version: tuple[int, int] | None
    detail: str


def _probe(name: str, get) -> Component:
    try:
        version, detail = get()
    except Exception as e:  # doctor reports every failure as a line, never a traceback
        return Component(name, None, f"{type(e).__name__}: {e}")
    return Component(name, version, detail)


def _cutile():
    from .system import _cutile
    ver = _cutile.cutile_version()
    parts = re.match(r"(\d+)\.(\d+)", ver)
    return ((int(parts.group(1)), int(parts.group(2))) if parts else None), ver


def _tool(which):
    def get():
        text = which()
        return release(text), text
    return get


def _nvrtc():
    from .system import toolchain
    major, minor = toolchain.nvrtc_version()
    return (major, minor), f"{major}.{minor}"


def _nvjitlink():
    from cuda.bindings import nvjitlink
    major, minor = nvjitlink.version()
    return (major, minor), f"{major}.{minor}"


def _nvdisasm():
    from .system import toolchain
    path = toolchain.nvdisasm()
    if path is None:
        raise FileNotFoundError("nvdisasm not found (SASS listings are off)")
    text = toolchain.run_version(path)
    return release(text), text


def _cccl():
    from .inputs import cccl
    found = cccl.version()
    if found is None:
        raise FileNotFoundError("CCCL headers not found (optional: splice[cccl])")
    return found[:2], ".".join(map(str, found))


def installed() -> list[Component]:
    """Every component splice uses, with its version.

    Returns:
        The components in the order ``cuda-tile``, the toolkit parts (``TOOLKIT_PARTS``),
        ``CCCL``; a missing one has ``version=None`` and says why in ``detail``.

    Raises:
        Nothing: a component that cannot be probed is reported, not raised.

    Example:
        ```python
        from splice import compat
        for c in compat.installed():
            print(c.name, c.version)
        ```
    """
    from .system import toolchain
    return [_probe("cuda-tile", _cutile),
            _probe("tileiras", _tool(toolchain.tileiras_version)),
            _probe("ptxas", _tool(toolchain.ptxas_version)),
            _probe("NVRTC", _nvrtc), _probe("nvJitLink", _nvjitlink),
            _probe("nvdisasm", _nvdisasm), _probe("CCCL", _cccl)]


def _minor(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def assess(components: list[Component]) -> tuple[bool, str]:
    """Whether the installed set is one splice is tested on, and the fix when it is not.

    Args:
        components: what :func:`installed` returned.

    Returns:
        ``(tested, text)``: ``text`` names the tested set, or what differs and the pip command
        that installs a tested set.

    Raises:
        Nothing.

    Example:
        ```python
        from splice import compat
        tested, text = compat.assess(compat.installed())
        print(text)
        ```
    """
    by = {c.name: c for c in components}
    problems = []
    cutile = by.get("cuda-tile")
    if cutile is not None and cutile.version not in TESTED_CUTILE:
        problems.append(f"cuda-tile {cutile.detail} (tested: "
                        f"{', '.join(_minor(v) for v in TESTED_CUTILE)})")
    minors = {c.name: c.version for c in components
              if c.name in TOOLKIT_PARTS and c.version is not None}
    target = minors.get("tileiras")
    if target not in TESTED_TOOLKITS:
        target = TESTED_TOOLKITS[-1]
    odd = {n: v for n, v in minors.items() if v != target}
    problems += [f"{n} {_minor(v)}" for n, v in sorted(odd.items())]
    tested = ", ".join(_minor(v) for v in TESTED_TOOLKITS)
    if not problems:
        return True, f"tested combination: cuda-tile {cutile.detail if cutile else '?'}, " \
                     f"CUDA {_minor(target)} toolchain (tested toolkits: {tested})"
    t = _minor(target)
    fix = (f"pip install 'cuda-tile>=1.7,<1.8' "
           f"'cuda-toolkit[tileiras,nvcc,nvvm,nvrtc,nvjitlink,nvdisasm]=={t}.*' "
           f"'nvidia-nvjitlink=={t}.*'")
    return False, (f"untested combination: {', '.join(problems)}; splice is tested with every "
                   f"toolkit part of one minor ({tested}). Fix: {fix}")
