"""The toolchain sets splice is tested on, which set is installed, and the fix for an untested
one that keeps what the other installed packages (PyTorch, JAX, CuPy...) require.

``python -m splice doctor`` prints :func:`installed`, :func:`assess` and :func:`beside`. The
tested sets are the ones CI runs the whole suite on (a venv per set, ``.ci/run``) and the H200
runs its GPU tests on; ``docs/compatibility.md`` lists them with the drivers and GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .system.toolchain import cuda_release as release

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

#: The parts of tileiras's CUDA minor: tileiras, what it runs (ptxas, libnvvm), and nvdisasm.
TOOLKIT_PARTS = ("tileiras", "ptxas", "libnvvm", "nvdisasm")


@dataclass(frozen=True)
class TestedSet:
    """One toolchain set CI runs the whole test suite on.

    Attributes:
        toolkit: the CUDA (major, minor) of every part in ``TOOLKIT_PARTS``.
        nvrtc: NVRTC's (major, minor).
        nvjitlink: nvJitLink's (major, minor).
        name: the set in words, for doctor.
    """
    toolkit: tuple[int, int]
    nvrtc: tuple[int, int]
    nvjitlink: tuple[int, int]
    name: str


#: The sets CI runs the suite on (``.ci/run``), best first: every part of CUDA 13.5 (what pip
#: picks alone), of 13.4, and what ``pip install torch splice`` picks beside PyTorch 2.14:
#: its NVRTC 13.0 (``cuda-toolkit[nvrtc]==13.0.3``), tileiras and nvJitLink 13.5.
TESTED_SETS: tuple[TestedSet, ...] = (
    TestedSet((13, 5), (13, 5), (13, 5), "CUDA 13.5"),
    TestedSet((13, 4), (13, 4), (13, 4), "CUDA 13.4"),
    TestedSet((13, 5), (13, 0), (13, 5), "CUDA 13.5 with NVRTC 13.0 (PyTorch 2.14's)"),
)
#: CUDA toolkit minors of tileiras, ptxas, libnvvm and nvdisasm tested.
TESTED_TOOLKITS: tuple[tuple[int, int], ...] = tuple(sorted({s.toolkit for s in TESTED_SETS}))
#: cuda-tile minors tested (splice uses cuTile internals: ``splice/system/_cutile.py``).
TESTED_CUTILE: tuple[tuple[int, int], ...] = ((1, 7),)
#: The wheel each component comes from: what doctor's pip command names.
PROJECTS = {"cuda-tile": "cuda-tile", "tileiras": "nvidia-cuda-tileiras",
            "ptxas": "nvidia-cuda-nvcc", "libnvvm": "nvidia-nvvm",
            "nvdisasm": "nvidia-cuda-nvdisasm", "NVRTC": "nvidia-cuda-nvrtc",
            "nvJitLink": "nvidia-nvjitlink"}


@dataclass(frozen=True)
class Component:
    """One installed component.

    Attributes:
        name: ``"cuda-tile"``, ``"tileiras"``, ``"ptxas"``, ``"libnvvm"``, ``"NVRTC"``,
            ``"nvJitLink"``, ``"nvdisasm"`` or ``"CCCL"``.
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
    return _version_minor(ver), ver


def _tool(which, part: str):
    """A tool's version from its ``--version``; when it cannot run (cuTile found no
    tileiras: its wheels differ in minor), its wheel's, so that the verdict names the odd
    one."""
    def get():
        from importlib import metadata

        from .errors import SpliceToolchainError
        try:
            text = which()
        except SpliceToolchainError:
            try:
                version = metadata.version(PROJECTS[part])
            except metadata.PackageNotFoundError:
                raise
            return _version_minor(version), f"{version} ({PROJECTS[part]}; not run)"
        return release(text), text
    return get


def _version_minor(text: str) -> tuple[int, int] | None:
    parts = re.match(r"(\d+)\.(\d+)", text)
    return (int(parts.group(1)), int(parts.group(2))) if parts else None


def _libnvvm():
    """libnvvm's version is its wheel's (``nvidia-nvvm``): the library prints none."""
    from importlib import metadata

    from .errors import SpliceToolchainError
    from .system import toolchain
    try:
        found = [c for c in toolchain._libnvvm_candidates() if c.exists()]
    except SpliceToolchainError:    # no tileiras: the wheel's version, for the verdict
        version = metadata.version(PROJECTS["libnvvm"])
        return _version_minor(version), f"{version} ({PROJECTS['libnvvm']}; tileiras not found)"
    if not found:
        raise FileNotFoundError("libnvvm missing beside tileiras")
    try:
        dist = metadata.distribution(PROJECTS["libnvvm"])
        owned = {Path(str(dist.locate_file(f))).resolve() for f in dist.files or ()
                 if f.name.startswith("libnvvm")}
    except metadata.PackageNotFoundError:
        owned = set()
    if found[0].resolve() not in owned:
        return None, f"{found[0]} (not from the nvidia-nvvm wheel: version unknown)"
    return _version_minor(dist.version), dist.version


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
        The components in the order ``cuda-tile``, ``tileiras``, ``ptxas``, ``libnvvm``,
        ``NVRTC``, ``nvJitLink``, ``nvdisasm``, ``CCCL``; a missing one has ``version=None``
        and says why in ``detail``.

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
            _probe("tileiras", _tool(toolchain.tileiras_version, "tileiras")),
            _probe("ptxas", _tool(toolchain.ptxas_version, "ptxas")),
            _probe("libnvvm", _libnvvm),
            _probe("NVRTC", _nvrtc), _probe("nvJitLink", _nvjitlink),
            _probe("nvdisasm", _nvdisasm), _probe("CCCL", _cccl)]


# ---------------------------------------------------------------------------------------------
# What the other installed packages require of the parts splice's advice names


@dataclass(frozen=True)
class Dist:
    """An installed distribution, as its metadata says.

    Attributes:
        name: its project name (``"torch"``).
        version: its version text (``"2.14.1"``).
        requires: its ``Requires-Dist`` lines, markers included.
        extras: its ``Provides-Extra`` names.
    """
    name: str
    version: str
    requires: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pin:
    """What an installed distribution requires of one project.

    Attributes:
        by: the distribution that requires it, ``"torch 2.14.1"``.
        project: the project required (canonical name).
        requirement: the requirement as written, without its marker.
        specifier: its version specifier (a ``packaging.specifiers.SpecifierSet``).
    """
    by: str
    project: str
    requirement: str
    specifier: SpecifierSet


def distributions(path: list[str] | None = None) -> list[Dist]:
    """The distributions installed (on ``sys.path``, or on ``path``).

    Args:
        path: directories to look in (``importlib.metadata.distributions(path=...)``);
            None: ``sys.path``.

    Returns:
        One :class:`Dist` a project (the first found, as ``import`` would).

    Raises:
        Nothing: a distribution with unreadable metadata is left out.

    Example:
        ```python
        from splice import compat
        print(sorted(d.name for d in compat.distributions())[:3])
        ```
    """
    from importlib import metadata

    from packaging.utils import canonicalize_name
    seen, out = set(), []
    found = metadata.distributions() if path is None else metadata.distributions(path=path)
    for d in found:
        name = d.metadata["Name"]
        if not name or canonicalize_name(name) in seen:
            continue
        seen.add(canonicalize_name(name))
        out.append(Dist(name, d.version, tuple(d.requires or ()),
                        tuple(d.metadata.get_all("Provides-Extra") or ())))
    return out


def _requirements(d: Dist):
    from packaging.requirements import InvalidRequirement, Requirement
    for text in d.requires:
        try:
            yield Requirement(text)
        except InvalidRequirement:
            continue


def _applies(req, extra: str) -> bool:
    """Whether ``req`` is in force here with ``extra`` asked for (a marker that cannot be
    evaluated counts: to be safe)."""
    from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
    try:
        return req.marker is None or req.marker.evaluate({"extra": extra})
    except (UndefinedComparison, UndefinedEnvironmentName):
        return True


def _versions(dists: list[Dist]) -> dict[str, str]:
    """{canonical project name: installed version}."""
    from packaging.utils import canonicalize_name
    return {canonicalize_name(d.name): d.version for d in dists}


def _holds(req, versions: dict[str, str]) -> bool:
    from packaging.utils import canonicalize_name
    have = versions.get(canonicalize_name(req.name))
    return have is not None and req.specifier.contains(have, prereleases=True)


def _binding(d: Dist, versions: dict, requested: set[str]) -> list:
    """The requirements of ``d`` in force: its own, and those of each extra someone asked
    for (``requested``) or whose requirements all hold (pip may have installed it so;
    counted, to be safe)."""
    from packaging.utils import canonicalize_name
    reqs = list(_requirements(d))
    out = [r for r in reqs if _applies(r, "")]
    asked = {canonicalize_name(x) for x in requested}
    for extra in d.extras:
        of_extra = [r for r in reqs if r.marker is not None and _applies(r, extra)
                    and not _applies(r, "")]
        if of_extra and (canonicalize_name(extra) in asked
                         or all(_holds(r, versions) for r in of_extra)):
            out += of_extra
    return out


def pins(dists: list[Dist]) -> list[Pin]:
    """What the installed distributions require, with a version, of each other: the pins
    doctor's advice must keep. splice's own requirements are not among them (doctor's
    advice is to change what they admit).

    Args:
        dists: the installed distributions (:func:`distributions`).

    Returns:
        One :class:`Pin` a versioned requirement in force (an extra's counts where another
        distribution asks for it, or where its requirements all hold).

    Raises:
        Nothing: a requirement that does not parse is left out.

    Example:
        ```python
        from splice import compat
        torch = compat.Dist("torch", "2.14.1", ("nvidia-cuda-nvrtc==13.0.88.*",))
        print(compat.pins([torch])[0].requirement)
        ```
    """
    from packaging.utils import canonicalize_name
    versions = _versions(dists)
    others = [d for d in dists if canonicalize_name(d.name) != "splice"]
    requested: dict[str, set[str]] = {}
    for d in others:
        for r in _requirements(d):
            if _applies(r, ""):
                requested.setdefault(canonicalize_name(r.name), set()).update(r.extras)
    out = []
    for d in others:
        for r in _binding(d, versions, requested.get(canonicalize_name(d.name), set())):
            if r.specifier:
                text = f"{r.name}{'[' + ','.join(sorted(r.extras)) + ']' if r.extras else ''}"
                out.append(Pin(f"{d.name} {d.version}", canonicalize_name(r.name),
                               f"{text}{r.specifier}", r.specifier))
    return out


def refusing(dists: list[Dist], requirement: str) -> list[Pin]:
    """The pins of installed packages that no version ``requirement`` asks for meets: what
    installing it would break (splice[nvshmem]'s ``nvidia-nvshmem-cu13>=3.8`` beside
    torch 2.14's ``==3.4.5``).

    Args:
        dists: the installed distributions (:func:`distributions`).
        requirement: a requirement, ``"nvidia-nvshmem-cu13>=3.8"``.

    Returns:
        The :class:`Pin` s on its project that refuse it (tried on the versions either
        names, and one part past each).

    Raises:
        packaging.requirements.InvalidRequirement: ``requirement`` does not parse.

    Example:
        ```python
        from splice import compat
        torch = compat.Dist("torch", "2.14.1", ("nvidia-nvshmem-cu13==3.4.5",))
        print(compat.refusing([torch], "nvidia-nvshmem-cu13>=3.8")[0].by)   # torch 2.14.1
        ```
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    want = Requirement(requirement)

    def meets(pin: Pin) -> bool:
        named = [c.version.removesuffix(".*") for c in (*pin.specifier, *want.specifier)]
        return any(want.specifier.contains(v, prereleases=True)
                   and pin.specifier.contains(v, prereleases=True)
                   for v in named + [f"{v}.1" for v in named])
    return [p for p in pins(dists) if p.project == canonicalize_name(want.name)
            and not meets(p)]


def admits(specifier, minor: tuple[int, int]) -> bool:
    """Whether a version specifier admits some release of ``minor``: tried on the edges
    its clauses name inside that minor, one step either side, one part longer (13.0.88.1,
    for ``>13.0.88``), and the minor's ends.

    Args:
        specifier: a ``packaging.specifiers.SpecifierSet``.
        minor: (major, minor).

    Returns:
        True when some version ``major.minor.*`` satisfies it.

    Raises:
        Nothing: a clause without a version is left to the specifier itself.

    Example:
        ```python
        from packaging.specifiers import SpecifierSet
        from splice import compat
        print(compat.admits(SpecifierSet("==13.0.88.*"), (13, 5)))   # False
        ```
    """
    from packaging.version import InvalidVersion, Version
    head = ".".join(map(str, minor))
    tries = {f"{head}.0", f"{head}.999999"}
    for clause in specifier:
        try:
            edge = Version(clause.version.removesuffix(".*")).release
        except InvalidVersion:
            continue
        if edge[:2] != minor or len(edge) < 3:
            continue
        tries.add(".".join(map(str, (*edge, 1))))     # between the edge and the next
        for step in (-1, 0, 1):
            last = edge[-1] + step
            if last >= 0:
                tries.add(".".join(map(str, (*edge[:-1], last))))
    return any(specifier.contains(v, prereleases=False) for v in tries)


def broken(dists: list[Dist]) -> list[tuple[Pin, str | None]]:
    """The pins on the parts splice uses (and the cuda-toolkit metapackage) that what is
    installed breaks, each with the version found (None: not installed).

    Args:
        dists: the installed distributions.

    Returns:
        ``(pin, found)`` pairs.

    Raises:
        Nothing: it reads only ``dists``.

    Example:
        ```python
        from splice import compat
        torch = compat.Dist("torch", "2.14.1", ("cuda-toolkit==13.0.3",))
        print(compat.broken([torch, compat.Dist("cuda-toolkit", "13.5.0")]))
        ```
    """
    versions = _versions(dists)
    watched = {*PROJECTS.values(), "cuda-toolkit"}
    bad = [(p, versions.get(p.project)) for p in pins(dists) if p.project in watched
           and (versions.get(p.project) is None
                or not p.specifier.contains(versions[p.project], prereleases=True))]
    return [b for i, b in enumerate(bad) if b not in bad[:i]]   # one pin, several extras


def beside(dists: list[Dist]) -> tuple[bool, str]:
    """What the other installed packages require of the parts splice uses, and whether
    what is installed keeps it.

    Args:
        dists: the installed distributions (:func:`distributions`).

    Returns:
        ``(ok, text)``: ``ok`` is False when an installed package's requirement on a part
        splice uses (or on the cuda-toolkit metapackage) is broken; ``text`` names the
        packages and their pins, or what is broken and the pip command that restores it.

    Raises:
        Nothing: it reads only ``dists``.

    Example:
        ```python
        from splice import compat
        print(compat.beside(compat.distributions())[1])
        ```
    """
    bad = broken(dists)
    if bad:
        return False, "; ".join(
            f"{p.by} requires {p.requirement}, {'found ' + found if found else 'missing'} "
            f"(pip install '{p.requirement}' restores it)" for p, found in bad)
    mine = [p for p in pins(dists) if p.project in PROJECTS.values()]
    if not mine:
        return True, "no other installed package pins a CUDA part splice uses"
    return True, f"kept: {_grouped(mine, dists)} (doctor's advice keeps these)"


def _grouped(pinned: list[Pin], dists: list[Dist]) -> str:
    """``pinned`` by the distribution that pins (:func:`_named`), each with its pins."""
    groups: dict[str, list[str]] = {}
    for p in pinned:
        if p.requirement not in groups.setdefault(p.by, []):
            groups[p.by].append(p.requirement)
    names = _named(dists)
    return "; ".join(f"{names.get(by, by)}: {', '.join(reqs)}" for by, reqs in groups.items())


def _named(dists: list[Dist]) -> dict[str, str]:
    """{``"name version"``: the same with the packages that require it, as in
    ``"cuda-toolkit 13.0.3 (for torch 2.14.1)"``}."""
    from packaging.utils import canonicalize_name
    wanted_by: dict[str, list[str]] = {}
    for d in dists:
        for r in _requirements(d):
            if _applies(r, "") and canonicalize_name(d.name) != "splice":
                wanted_by.setdefault(canonicalize_name(r.name), []).append(
                    f"{d.name} {d.version}")
    out = {}
    for d in dists:
        by = wanted_by.get(canonicalize_name(d.name))
        out[f"{d.name} {d.version}"] = (f"{d.name} {d.version}" +
                                        (f" (for {', '.join(by)})" if by else ""))
    return out


# ---------------------------------------------------------------------------------------------
# The verdict


def _minor(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def _wanted(s: TestedSet) -> dict[str, tuple[int, int]]:
    return {**{n: s.toolkit for n in TOOLKIT_PARTS}, "NVRTC": s.nvrtc,
            "nvJitLink": s.nvjitlink}


#: Parts compared only where their version is known: nvdisasm is optional, and libnvvm's is
#: its wheel's (a toolkit's libnvvm is tileiras's own, of its minor).
_KNOWN_ONLY = ("libnvvm", "nvdisasm")


def _differs(minors: dict, s: TestedSet) -> dict[str, tuple[int, int]]:
    """The parts to change for the set ``s``, each to its minor."""
    return {n: v for n, v in _wanted(s).items()
            if minors.get(n) != v and (n not in _KNOWN_ONLY or minors.get(n) is not None)}


def _kept(change: dict[str, tuple[int, int]], pinned: list[Pin]) -> list[Pin]:
    """The pins that ``change`` ({part: minor}) would break."""
    return [p for p in pinned for n, v in change.items()
            if p.project == PROJECTS[n] and not admits(p.specifier, v)]


def _closest(minors: dict) -> list[TestedSet]:
    """The tested sets, the one the fewest changes give first (tileiras's minor first)."""
    return sorted(TESTED_SETS, key=lambda s: (len(_differs(minors, s)),
                                              s.toolkit != minors.get("tileiras")))


def _fix(minors: dict, cutile_ok: bool, pinned: list[Pin]):
    """(set, pip requirements) of the tested set that the fewest changes give without
    breaking a pin; (None, the pins in the way) when none does."""
    blocked: list[Pin] = []
    for s in _closest(minors):
        change = _differs(minors, s)
        against = _kept(change, pinned)
        if against:
            blocked += [p for p in against if p not in blocked]
            continue
        return s, ([] if cutile_ok else ["cuda-tile>=1.7,<1.8"]) + \
            [f"{PROJECTS[n]}=={_minor(v)}.*" for n, v in change.items()]
    return None, blocked


def assess(components: list[Component], dists: list[Dist] | None = None) -> tuple[bool, str]:
    """Whether the installed set is one splice is tested on, and the fix when it is not: a
    pip command that keeps what the other installed packages (PyTorch, JAX, CuPy...) pin.

    Args:
        components: what :func:`installed` returned.
        dists: the installed distributions whose pins the fix keeps (:func:`distributions`);
            None: those installed now.

    Returns:
        ``(tested, text)``: ``text`` names the tested set, or what differs and the pip
        command that installs a tested set (or, when every such command would break an
        installed package's pin, which pins are in the way).

    Raises:
        Nothing: a missing component is part of the verdict.

    Example:
        ```python
        from splice import compat
        tested, text = compat.assess(compat.installed())
        print(text)
        ```
    """
    by = {c.name: c for c in components}
    minors = {c.name: c.version for c in components
              if c.name in PROJECTS and c.version is not None}
    cutile = by.get("cuda-tile")
    match = next((s for s in TESTED_SETS if not _differs(minors, s)), None)
    cutile_ok = cutile is None or cutile.version in TESTED_CUTILE
    if match is not None and cutile_ok:
        return True, (f"tested combination: cuda-tile {cutile.detail if cutile else '?'}, "
                      f"{match.name}")
    dists = distributions() if dists is None else dists
    pinned = pins(dists)
    target, fix = _fix(minors, cutile_ok, pinned)
    problems = [] if cutile is None or cutile_ok else [
        f"cuda-tile {cutile.detail} (tested: {', '.join(_minor(v) for v in TESTED_CUTILE)})"]
    problems += [f"{n} {_minor(minors[n]) if n in minors else 'missing'}"
                 for n in _differs(minors, target or _closest(minors)[0])]
    head = (f"untested combination: {', '.join(problems)} (tested sets: "
            f"{'; '.join(s.name for s in TESTED_SETS)})")
    if target is None:
        return False, (f"{head}. No pip command gives a tested set without breaking what is "
                       f"installed: " + "; ".join(f"{p.by} requires {p.requirement}"
                                                  for p in fix))
    names = _named(dists)
    keeps = sorted({names.get(p.by, p.by) for p in pinned if p.project in PROJECTS.values()})
    keep = f" (keeps the pins of {', '.join(keeps)})" if keeps else ""
    return False, (f"{head}. Fix, for {target.name}{keep}: pip install "
                   + " ".join(f"'{r}'" for r in fix))
