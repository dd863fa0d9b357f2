"""The pipeline as stages: each timed (``Build.timings``, the log at DEBUG), each written to
``$SPLICE_DUMP_DIR`` as it is made (also when a later stage fails), and the fma-to-atomic
fallback driven by the rewriter's report and stable call-site keys, not by trace indices."""

import json
import logging

import cuda.tile as ct
import pytest

import splice
from splice.driver import stages
from splice.errors import SpliceCompileError, SpliceRewriteError
from splice.forms import rewrite
from splice.forms.base import Marker
from splice.tracing import trace
from support import kernels as K

f32 = ct.float32
SIG = K.signature(K.array(f32), K.array(f32), 256)
CONTROL_SIG = K.signature(K.array(f32), K.array(f32), 3, 256)
STAGES = ("trace", "key", "lower", "fragments", "splice", "link", "assemble")


def test_every_stage_is_timed_and_shown(fresh_cache, caplog):
    with caplog.at_level(logging.DEBUG, logger="splice"):
        b = splice.build(K.saxpy_kernel, K.signature(
            K.array(f32), K.array(f32), K.array(f32), K.scalar(f32), 256), "sm_90")
    assert tuple(b.timings) == (*STAGES[:2], "cache", *STAGES[2:])
    assert all(v >= 0 for v in b.timings.values())
    assert sum(b.timings.values()) <= b.seconds
    assert b.lowerings == 1 and "compiled in" in b.summary()
    for stage in STAGES:
        assert f"{stage} took" in caplog.text
    hit = splice.build(K.saxpy_kernel, K.signature(
        K.array(f32), K.array(f32), K.array(f32), K.scalar(f32), 256), "sm_90")
    assert hit.from_cache and tuple(hit.timings) == ("trace", "key", "cache")
    assert "from the cache in" in hit.summary()


def test_dump_dir_holds_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLICE_DUMP_DIR", str(tmp_path))
    b = splice.build(K.ptx_kernel, SIG, "sm_90")
    d = tmp_path / f"{b.symbol}.{b.arch}"
    got = {p.name[len(b.symbol):] for p in d.iterdir()}
    assert {".tilebc", ".ptx", ".tileir", ".fragment0.ptx", ".rewritten.ptx",
            ".spliced.ptx", ".cubin", ".timings.json"} <= got
    assert (d / f"{b.symbol}.ptx").read_text() == b.ptx
    assert (d / f"{b.symbol}.spliced.ptx").read_text() == b.spliced_ptx
    assert (d / f"{b.symbol}.cubin").read_bytes() == b.cubin
    timings = json.loads((d / f"{b.symbol}.timings.json").read_text())
    assert set(timings["stages"]) >= set(STAGES) and timings["lowerings"] == 1


def test_a_failed_build_leaves_the_stages_before_the_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("SPLICE_DUMP_DIR", str(tmp_path))
    bad = splice.extern(source='extern "C" __device__ float pbad(float x) { return x +; }',
                        name="pbad", signature="float32(float32)")(lambda x: None)

    @splice.kernel
    def pbad_kernel(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=bad(t))

    with pytest.raises(SpliceCompileError):
        splice.build(pbad_kernel, SIG, "sm_90")
    [d] = tmp_path.iterdir()
    got = {p.suffix for p in d.iterdir()}
    assert ".tilebc" in got and ".ptx" in got          # trace and lower ran
    assert ".cubin" not in got


def test_site_keys_are_stable_and_distinct(one_fma_rounding):
    a = trace.trace_kernel(K.control_kernel, CONTROL_SIG, "sm_90")
    keys = [s.key for s in a.sites]
    assert len(set(keys)) == len(keys) == 4
    # helper() is called twice: same source line of the call, told apart by its caller
    h1, h2 = (k for k in keys if k.count("<-") == 1)
    assert h1.split("<-")[0] == h2.split("<-")[0] and h1 != h2
    b = trace.trace_kernel(K.control_kernel, CONTROL_SIG, "sm_90",
                             atomic_sites=frozenset(keys[1:3]))
    assert [s.key for s in b.sites] == keys
    assert [s.marker for s in b.sites] == [Marker.FMA, Marker.ATOMIC, Marker.ATOMIC,
                                           Marker.FMA]


def test_two_calls_on_one_line_get_their_own_keys():
    @splice.kernel
    def two_on_a_line(x, y, TILE: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
        ct.store(y, index=(ct.bid(0),), tile=K.step(t, 1.0) + K.step(t, 2.0))

    traced = trace.trace_kernel(two_on_a_line, SIG, "sm_90")
    k1, k2 = (s.key for s in traced.sites)
    assert k1 != k2


def test_fallback_gives_exactly_the_refused_sites_the_atomic_marker(one_fma_rounding,
                                                                    fresh_cache):
    # a fresh cache: a compile of this kernel earlier in the session would be a hit
    b = splice.compile(K.control_kernel, CONTROL_SIG, "sm_90")
    assert [s.marker for s in b.sites] == ["fma", "atomic", "atomic", "fma"]
    assert b.lowerings == 2 and b.timings["lower"] > 0
    assert all(s.why_atomic for s in b.sites[1:3]) and not b.sites[0].why_atomic


def test_a_refusal_with_no_pure_site_left_is_the_rewriters_error(monkeypatch, fresh_cache):
    # the rewriter refuses every round: the driver gives each pure site the atomic marker,
    # and when none is left, raises the refusal's own error (it never loops)
    calls = []

    def refusing(module, sites, *, kernel_name):
        calls.append({i: s.marker for i, s in sites.items()})
        return rewrite.SpliceReport({}, {}, "", refused=rewrite.Refusal(
            frozenset(), "made up", f"cannot prove the call-site rewrite of {kernel_name}"))

    monkeypatch.setattr(stages.rewrite, "splice_calls", refusing)
    with pytest.raises(SpliceRewriteError, match="cannot prove the call-site rewrite"):
        splice.compile(K.control_kernel, CONTROL_SIG, "sm_90")
    assert len(calls) == 2
    assert set(calls[0].values()) == {Marker.FMA}
    assert set(calls[1].values()) == {Marker.ATOMIC}


def test_build_repr_leaves_out_the_cubin_and_the_stages():
    """A build shown in a REPL or a log names its kernel, symbol and sites; the cubin, the
    PTX stages and the spans (hundreds of KB) are attributes to read, not its repr."""
    sig = K.signature(K.array(ct.float32), K.array(ct.float32), K.array(ct.float32),
                      K.scalar(ct.float32), 128)
    b = splice.compile(K.saxpy_kernel, sig, "sm_90")
    text = repr(b)
    assert b.symbol in text and "sites=[" in text and "saxpy" in text
    assert b.spliced_ptx and b.spliced_ptx[:200] not in text and "cubin=" not in text
    assert len(text) < 4000, len(text)
