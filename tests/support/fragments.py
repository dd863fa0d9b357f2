"""Device code in the forms splice links without compiling it: LTO-IR and relocatable
cubins, built with NVRTC for the tests."""

from __future__ import annotations

LTO_SRC = b'extern "C" __device__ float lto_f(float x) { return x * 3.0f + 1.0f; }\n'
OBJ_SRC = b'extern "C" __device__ float obj_f(float x) { return x * 5.0f - 1.0f; }\n'


def ltoir(arch="sm_90a") -> bytes:
    """LTO-IR of ``lto_f`` (float32 -> x * 3 + 1) for ``arch``."""
    from splice.system.toolchain import nvrtc_compile_ltoir
    return nvrtc_compile_ltoir(LTO_SRC, "lto.cu", [f"-arch={arch}", "-rdc=true", "-dlto"])


def rdc_cubin(tmp_path, arch="sm_90a"):
    """A relocatable cubin of ``obj_f`` (float32 -> x * 5 - 1), written under ``tmp_path``;
    returns its path."""
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(OBJ_SRC, b"obj.cu", 0, [], [])
    opts = [f"-arch={arch}".encode(), b"-rdc=true"]
    assert nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0] == 0
    err, n = nvrtc.nvrtcGetCUBINSize(prog)
    buf = bytearray(n)
    nvrtc.nvrtcGetCUBIN(prog, buf)
    p = tmp_path / "obj.cubin"
    p.write_bytes(bytes(buf))
    return p


def nvjitlink_too_old() -> bool:
    """nvJitLink older than tileiras's ptxas (splice refuses binary objects then)."""
    from cuda.bindings import nvjitlink

    from splice.compat import release
    from splice.system import toolchain
    need = release(toolchain.ptxas_version())
    return need is not None and tuple(nvjitlink.version()) < need


def save_source_mid_build(monkeypatch, frag) -> list:
    """Make ``frag``'s content key change, and reading its PTX again fail, once the
    fragments stage has compiled the fragments and starts the forms' callee checks
    (``check_callees``): as a CUDA C source saved mid-build would, for the checks after it,
    which must use the keys and PTX the fragments stage took. Returns a list that is
    non-empty once that point was reached."""
    from splice.driver import stages
    cls, group, saved = type(frag), stages._sites_by_form, []
    real_key, real_module = cls.content_key, cls.module

    def content_key(self, target):
        return real_key(self, target) + ("-saved" if saved and self is frag else "")

    def module(self, target, *a, **kw):
        assert not (saved and self is frag), "the fragment was read again after the stage"
        return real_module(self, target, *a, **kw)

    def group_then_save(sites):
        out = group(sites)
        saved.append(True)
        return out
    monkeypatch.setattr(cls, "content_key", content_key)
    monkeypatch.setattr(cls, "module", module)
    monkeypatch.setattr(stages, "_sites_by_form", group_then_save)
    return saved
