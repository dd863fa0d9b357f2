"""The two users of ``tests/test_shared_machine.py``, run by children that setuid'd to
unused uids: ``python -m support.shared_machine ROLE WORLD``. The attacker plants
(overlays in the three places splice looks, forged cache entries, links, a held lock, a
pre-created ``$TMPDIR/splice-<uid>``); the victim compiles in each planted world and
writes what happened to ``WORLD/results-<role>.json``. Written against splice's
public behaviour and the internals that every version of it has (``toolchain.overlay``,
``cache.entries``, ``cache._MAGIC``/``_digest``), so that the same script shows the
attacks working on a splice without the checks."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import cuda.tile as ct
from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature

import splice
from splice.inputs import fragments, headers
from splice.system import cache, toolchain
from splice.tracing import trace

ARCH = "sm_90"
#: 5.0f, what the extern multiplies by; the forged fragment multiplies by 7.0f.
GENUINE, FORGED = "0f40A00000", "0f40E00000"
FORGED_TAIL = b"FORGED-BY-ATTACKER"


def _array():
    return ArrayConstraint(ct.float32, 1, index_dtype=ct.int32, stride_lower_bound_incl=0,
                           alias_groups=(), may_alias_internally=False, stride_constant=(1,),
                           stride_divisible_by=(1,), base_addr_divisible_by=16,
                           shape_divisible_by=16)


SIG = KernelSignature((_array(), _array(), 256), CallingConvention.cutile_python_v1())


@functools.cache
def kernels(world: str):
    """Three kernels calling one extern read from ``WORLD/src/five.cu``: ``a`` (the
    attacker builds it and forges its entries), ``b`` and ``f`` (built by the victim only:
    ``f`` would pick up a forged fragment)."""
    five = splice.extern(path=f"{world}/src/five.cu", name="five",
                         signature="float32(float32)")(lambda x: None)

    @splice.kernel
    def kernel_a(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=five(ct.load(x, index=(ct.bid(0),),
                                                         shape=(TILE,))))

    @splice.kernel
    def kernel_b(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=five(ct.load(x, index=(ct.bid(0),),
                                                         shape=(TILE,))) + 1.0)

    @splice.kernel
    def kernel_f(x, y, TILE: ct.Constant[int]):
        ct.store(y, index=(ct.bid(0),), tile=five(ct.load(x, index=(ct.bid(0),),
                                                         shape=(TILE,))) * 3.0)
    return {"a": kernel_a, "b": kernel_b, "f": kernel_f}


def build(world: str, name: str):
    return splice.build(kernels(world)[name], SIG, ARCH, keep_stages=True)


@contextlib.contextmanager
def env(**values):
    """Environment variables set (None: removed), caches of the old settings cleared."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    _forget()
    try:
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        _forget()


def _forget():
    """Forget what this process found: the overlay, compiled fragments, parsed trust, and
    the facts a later process reads from the cache (tileiras's bytecode version, include
    walks), so that the next build reads the cache as a new process would."""
    toolchain.overlay.cache_clear()
    fragments._memo.clear()
    trace._versions.clear()
    with headers._lock:
        headers._walks.clear()
    for name in ("_parse_trust", "_temporary_root"):
        for mod in vars(splice).values():
            f = getattr(mod, name, None)
            if hasattr(f, "cache_clear"):
                f.cache_clear()


@contextlib.contextmanager
def toolkit(root: Path):
    """splice running the tileiras of the toolkit copy under ``root`` (the test's
    ``_fake_toolkit``)."""
    real = toolchain.tileiras
    toolchain.tileiras = lambda: root / "cu13" / "bin" / "tileiras"
    toolchain.ptxas.cache_clear()
    _forget()
    try:
        yield
    finally:
        toolchain.tileiras = real
        toolchain.ptxas.cache_clear()
        _forget()


class Hung(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: int):
    def ring(*_):
        raise Hung(f"still waiting after {seconds} s")
    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def attempt(fn) -> dict:
    """What ``fn()`` did: its result, or the exception's type and message; warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = {"ok": True, "value": fn()}
        except BaseException as e:   # recorded: the test judges it
            out = {"ok": False, "error": type(e).__name__, "message": str(e)[:2000],
                   "trace": traceback.format_exc()[-3000:]}
    out["warnings"] = [str(w.message) for w in caught if "splice" in str(w.message)]
    return out


# ---------------------------------------------------------------------------------------------
# the attacker


def plant_overlay(src: Path, dest: Path, marker: Path) -> None:
    """A copy of the overlay ``src`` at ``dest`` whose capturing ptxas also creates
    ``marker``: proof that it ran, as whoever ran it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest, symlinks=True)
    script = dest / "bin" / "ptxas"
    lines = script.read_text().split("\n", 1)
    script.write_text(f"{lines[0]}\ntouch {marker}\n{lines[1]}")
    for p in (dest, dest.parent, dest / "bin"):
        p.chmod(0o755)
    for p in (script, dest / "bin" / "tileiras"):   # (a copy of splice's 0700 one)
        p.chmod(0o755)


def forge(entry: Path, change) -> None:
    """Rewrite a cache entry with ``change(payload)`` and a matching checksum."""
    data = entry.read_bytes()
    nl = data.index(b"\n", len(cache._MAGIC))
    header = json.loads(data[len(cache._MAGIC):nl])
    payload = change(data[nl + 1:])
    header.update(size=len(payload), sha256=cache._digest(header["meta"], payload))
    entry.write_bytes(cache._MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" +
                      payload)


def share(tree: Path, dest: Path, dir_mode: int) -> None:
    """Copy the cache entries of ``tree`` into ``dest``, readable by all."""
    for kind in ("kernel", "fragment", "stages"):
        if (tree / kind).is_dir():
            shutil.copytree(tree / kind, dest / kind, dirs_exist_ok=True)
    for p in dest.rglob("*"):
        if "toolchain" not in p.parts[len(dest.parts):] and p.lstat().st_uid == os.getuid():
            p.chmod(dir_mode if p.is_dir() else 0o664)


def attacker_plant(world: Path) -> dict:
    """Everything the attacker leaves before the victim comes."""
    marks = world / "marks"
    own = Path(os.environ["SPLICE_CACHE_DIR"])
    a = build(str(world), "a")
    for entry in cache.entries("kernel"):
        forge(entry, lambda cubin: cubin + FORGED_TAIL)
    for entry in cache.entries("fragment"):
        forge(entry, lambda ptx: ptx.replace(GENUINE.encode(), FORGED.encode()))
    ov = toolchain.overlay()
    uid = world.joinpath("victim-uid").read_text().strip()
    # 1. $TMPDIR/splice-<uid> (with the overlay of a toolkit whose parent no one can
    #    write), and an empty 0700 one in another TMPDIR
    with toolkit(world / "pkgs-root"), env(SPLICE_CACHE_DIR=str(own / "fake-root")):
        fake = toolchain.overlay()
    plant_overlay(fake, world / "tmp" / f"splice-{uid}" / fake.name, marks / "tmp")
    (world / "tmp2" / f"splice-{uid}").mkdir(mode=0o700)
    # 2. <cache>/toolchain of a world-writable cache, and of a group-shared one
    for name, mode in (("world-cache", 0o777), ("group-cache", 0o2770)):
        shared = world / name
        plant_overlay(ov, shared / "toolchain" / ov.name, marks / name)
        share(own, shared, mode)
        (shared / "toolchain").chmod(mode)
    group = world / "group-cache"
    (group / ".size").symlink_to(world / "victim" / "precious-size")
    (group / ".lock").symlink_to(world / "victim" / "made-by-lock")
    # 3. <toolkit>/../.splice-overlay of a toolkit in a directory others can write
    with toolkit(world / "pkgs"), env(SPLICE_CACHE_DIR=str(own / "fake")):
        fake = toolchain.overlay()
    plant_overlay(fake, world / "pkgs" / ".splice-overlay" / fake.name, marks / "near")
    # 4. the dump directory of kernel a, its cubin a link to the victim's file
    dump = world / "dumps" / f"{a.symbol}.{ARCH}"
    dump.mkdir(mode=0o777)
    dump.chmod(0o777)
    (dump / f"{a.symbol}.cubin").symlink_to(world / "victim" / "precious-dump")
    return {"symbol": a.symbol}


def attacker_hold(world: Path) -> dict:
    """Hold the lock of the victim's default cache while the victim stores."""
    sync = world / "sync"
    while not (sync / "victim-ready").exists():
        time.sleep(0.05)
    lock = world / "victim" / ".cache" / "splice" / ".lock"
    try:
        fd = os.open(lock, os.O_RDONLY)
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_EX)
        status = "held"
    except OSError as e:
        status = f"denied: {e}"
    (sync / "attacker-status").write_text(status)
    for _ in range(1200):
        if (sync / "victim-done").exists():
            break
        time.sleep(0.05)
    return {"status": status}


# ---------------------------------------------------------------------------------------------
# the victim


def marks(world: Path) -> list[str]:
    return sorted(p.name for p in (world / "marks").iterdir())


def victim_lock(world: Path) -> dict:
    """Build in the default cache (``~/.cache/splice``), let the attacker try its lock,
    then store again."""
    sync = world / "sync"
    first = attempt(lambda: build(str(world), "a").symbol)
    (sync / "victim-ready").write_text("")
    while not (sync / "attacker-status").exists():
        time.sleep(0.05)
    with deadline(20):
        second = attempt(lambda: build(str(world), "b").symbol)
    (sync / "victim-done").write_text("")
    return {"first": first, "second": second,
            "attacker": (sync / "attacker-status").read_text()}


def victim_temporary(world: Path) -> dict:
    """The cache cannot hold the overlay (a read-only cache directory), nor the toolkit's
    parent directory."""
    out = {}
    for name in ("tmp", "tmp2"):
        tempfile.tempdir = str(world / name)
        with toolkit(world / "pkgs-root"), env(SPLICE_CACHE_DIR=str(world / "ro-cache")):
            out[name] = attempt(lambda: (build(str(world), "b").symbol, marks(world)))
    tempfile.tempdir = None
    return out


def victim_near(world: Path) -> dict:
    """A toolkit whose parent directory others can write."""
    with toolkit(world / "pkgs"), env(SPLICE_CACHE_DIR=str(world / "ro-cache")):
        return attempt(lambda: (build(str(world), "b").symbol, marks(world)))


def _built(world: Path, name: str) -> dict:
    b = build(str(world), name)
    return {"forged_cubin": b.cubin.endswith(FORGED_TAIL),
            "forged_fragment": FORGED in (b.spliced_ptx or ""),
            "genuine_fragment": GENUINE in (b.spliced_ptx or ""), "marks": marks(world)}


def victim_shared(world: Path) -> dict:
    """A world-writable cache; a group-shared one, untrusted and trusted."""
    group = str(world / "group-cache")
    gid = world.joinpath("group-gid").read_text().strip()
    out = {}
    for name, settings in (
            ("world", {"SPLICE_CACHE_DIR": str(world / "world-cache")}),
            ("group", {"SPLICE_CACHE_DIR": group}),
            ("group-trusted", {"SPLICE_CACHE_DIR": group, "SPLICE_CACHE_TRUST": f"@{gid}"})):
        with env(**{"SPLICE_CACHE_TRUST": None, **settings}):
            out[name] = {k: attempt(lambda k=k: _built(world, k)) for k in "af"}
    out["precious-size"] = (world / "victim" / "precious-size").read_text()
    out["made-by-lock"] = (world / "victim" / "made-by-lock").exists()
    return out


def victim_dump(world: Path) -> dict:
    with env(SPLICE_DUMP_DIR=str(world / "dumps"),
             SPLICE_CACHE_DIR=str(world / "victim" / "dump-cache")):
        out = attempt(lambda: build(str(world), "a").symbol)
    out["precious"] = (world / "victim" / "precious-dump").read_bytes()[:8].hex()
    return out


def victim_homeless(world: Path) -> dict:
    with env(HOME=None, XDG_CACHE_HOME=None, SPLICE_CACHE_DIR=None):
        return attempt(lambda: build(str(world), "b").symbol)


def victim_files(world: Path) -> dict:
    """A FIFO at a cache entry, a source and an ``#include``; ``/dev/zero`` as a source."""
    out = {}
    with env(SPLICE_CACHE_DIR=str(world / "victim" / "fifo-cache")):
        build(str(world), "b")
        [entry] = cache.entries("kernel")
        entry.unlink()
        os.mkfifo(entry)
        with deadline(10):
            out["entry"] = attempt(lambda: build(str(world), "b").symbol)
        for name, text in (("fifo", None), ("zero", None),
                           ("include", '#include "fifo.cuh"\n')):
            def compile_one(name=name, text=text):
                return splice.compile(_calling(_swapped(world, name, text)), SIG, ARCH)
            with deadline(10), _memory_limit(1 << 30):
                out[name] = attempt(lambda f=compile_one: f() is not None)
    return out


def _swapped(world: Path, name: str, text: str | None):
    """An extern declared from a regular file that is then replaced by a FIFO or a link
    to ``/dev/zero`` (an ``#include``: declared from text, the header a FIFO)."""
    body = 'extern "C" __device__ float g(float x) { return x; }\n'
    if text:
        return splice.extern(source=text + body, name="g", signature="float32(float32)",
                             include_dirs=[str(world / "src")])
    path = world / "victim" / f"{name}.cu"
    path.write_text(body)
    ext = splice.extern(path=str(path), name="g", signature="float32(float32)")
    path.unlink()
    os.mkfifo(path) if name == "fifo" else path.symlink_to("/dev/zero")
    return ext


def _calling(ext):
    @splice.kernel
    def kernel_g(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=ext(t))
    return kernel_g


@contextlib.contextmanager
def _memory_limit(extra: int):
    """At most ``extra`` more bytes of address space (the soft limit: restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


ROLES = {
    "attacker-plant": [attacker_plant],
    "attacker-hold": [attacker_hold],
    "victim": [victim_lock, victim_temporary, victim_near, victim_shared, victim_dump,
               victim_files, victim_homeless],
}


def become(uid: int, group: int, world: Path) -> None:
    """Build once as root, in a cache thrown away (the interpreter's own files, imported on
    first use, may be private to root, as with pyenv under ``/root``), then become ``uid``
    for good."""
    scratch = tempfile.mkdtemp()
    with env(SPLICE_CACHE_DIR=scratch):
        build(str(world), "b")
    shutil.rmtree(scratch)
    os.setgroups([group])
    os.setgid(uid)
    os.setuid(uid)


def main(roles: dict | None = None) -> None:
    """Play the role ``argv[1]`` of ``roles`` (default :data:`ROLES`) in the world
    ``argv[2]`` as the uid ``argv[3]``: each step's result in ``results/<role>.json``."""
    role, world, uid = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    become(uid, int(world.joinpath("group-gid").read_text()), world)
    results = {}
    for step in (ROLES if roles is None else roles)[role]:
        results[step.__name__] = attempt(lambda step=step: step(world))
        world.joinpath("results", f"{role}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
