"""Every reason why_not_inlinable gives, pinned word for word (the rewriter reports it)."""
import pytest

from splice.ptxtools.inline import why_not_inlinable
from splice.ptxtools.ptx import Module

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"
SIG = ".visible .func (.param .b32 r) pf(.param .b32 x)"


def _why(body, regs=".reg .b32 %r<4>;\n.reg .b64 %rd<4>;", sig=SIG, extra=""):
    mod = Module(HEAD + extra + sig + "\n{\n" + regs + "\n" + body + "\n}\n")
    fns = {f.name: (mod, f) for f in mod.function_order}
    return why_not_inlinable(mod, fns["pf"][1], fns)


OK = "ld.param.b32 %r1, [x];\nst.param.b32 [r], %r1;\nret;"


@pytest.mark.parametrize("body, regs, sig, extra, why", [
    (OK, None, None, "", None),
    (None, None, ".extern .func (.param .b32 r) pf(.param .b32 x);", "",
     "it is only declared here"),
    (OK, None, ".visible .func (.param .align 4 .b8 r[12]) pf(.param .b32 x)", "",
     "parameter 'r' is an aggregate (.param .align 4 .b8 r[12])"),
    ("ld.param.b32 %__splice_q1, [x];\nst.param.b32 [r], %r1;\nret;",
     ".reg .b32 %r<4>;\n.reg .b32 %__splice_q<2>;", None, "",
     "it uses a name splice reserves for its own registers and labels"),
    (".local .align 4 .b8 buf[16];\n" + OK, None, None, "",
     "it declares .local memory (a stack frame or shared buffer)"),
    (".shared .align 4 .b8 buf[16];\n" + OK, None, None, "",
     "it declares .shared memory (a stack frame or shared buffer)"),
    ("mov.u64 %rd1, %SP;\n" + OK, ".reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n.reg .b64 %SP;",
     None, "", "it uses a local stack frame (%SP)"),
    ("alloca.u64 %rd1, 16;\n" + OK, None, None, "", "it allocates stack memory (alloca)"),
    ("call.uni (%r2), %rd1, (%r1), proto;\n" + OK, None, None,
     "", "it makes an indirect call"),
    ("ld.param.b32 %r1, [x];\n{ .param .b32 a; .param .b32 b; st.param.b32 [a], %r1; "
     "call.uni (b), pf, (a); }\nst.param.b32 [r], %r1;\nret;", None, None, "",
     "it is recursive"),
    ("mov.u64 %rd1, x;\nld.param.b32 %r1, [x];\nst.param.b32 [r], %r1;\nret;", None, None,
     "", "a parameter is used by 'mov.u64 %rd1, x;'"),
    ("ld.param.b32 %r1, [x];\ncvt.u16.u32 %rs1, %r1;\nst.param.b32 [r], %rs1;\nret;",
     ".reg .b32 %r<4>;\n.reg .b16 %rs<2>;", None, "",
     "the return value is stored from a 16-bit register with 'st.param.b32 [r], %rs1;'"),
])
def test_each_refusal_reason(body, regs, sig, extra, why):
    sig = sig or SIG
    if body is None:
        mod = Module(HEAD + sig + "\n")
        fns = {f.name: (mod, f) for f in mod.function_order}
        assert why_not_inlinable(mod, fns["pf"][1], fns) == why
        return
    assert _why(body, regs or ".reg .b32 %r<4>;\n.reg .b64 %rd<4>;", sig, extra) == why
