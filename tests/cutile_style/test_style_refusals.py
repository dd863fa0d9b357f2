"""cuTile's refusals, in cuTile's own test style: ``ct.kernel`` and
``ct.compilation.export_kernel`` to a cubin (no GPU needed). Plain, these test cuTile; run
with ``-p splice.testing.dropin`` every ``ct.kernel`` is a ``splice.kernel`` and
``export_kernel`` is splice's, so they test that splice keeps cuTile's exception classes
and messages (``tests/test_dropin_plugin.py`` runs them both ways)."""

from io import BytesIO

import cuda.tile as ct
import pytest
from refused_kernels import REFUSED


def signature(*params):
    """A KernelSignature of parameter texts (splice's grammar: cuTile's ``from_kernel_args``
    needs device arrays) and constants."""
    import splice
    return splice.kernel_signature(*params)


def export(kernel, params, arch="sm_90"):
    out = BytesIO()
    ct.compilation.export_kernel(kernel, [signature(*params)], out, gpu_code=arch,
                                 output_format="cubin")
    return out.getvalue()


@pytest.mark.parametrize("func, exc, arch, param, said", REFUSED,
                         ids=[r[0].__name__ for r in REFUSED])
def test_refused(func, exc, arch, param, said):
    kernel = ct.kernel(func)
    with pytest.raises(exc) as e:
        export(kernel, [param], arch)
    assert type(e.value) is exc or exc in type(e.value).__mro__
    assert e.value.message.startswith(said)
    assert e.value.loc.filename.endswith("refused_kernels.py")


def test_compiles():
    @ct.kernel
    def scale(x, y, n: ct.Constant[int]):
        t = ct.load(x, index=(ct.bid(0),), shape=(16,))
        ct.store(y, index=(ct.bid(0),), tile=t * n)

    cubin = export(scale, ["array(float32)", "array(float32)", 3])
    assert cubin[:4] == b"\x7fELF"


def test_static_assert_that_holds_compiles():
    @ct.kernel
    def kernel(x, n: ct.Constant[int]):
        ct.static_assert(n < 100, "n is too large")
        ct.store(x, index=(0,), tile=ct.full((16,), n, ct.float32))

    assert export(kernel, ["array(float32)", 4])[:4] == b"\x7fELF"
    with pytest.raises(ct.TileStaticAssertionError, match="Static assertion failed: n is too"):
        export(kernel, ["array(float32)", 400])


def test_kernel_type(request):
    # under the plugin the kernels are splice's; plain, cuTile's
    @ct.kernel
    def kernel(x):
        pass

    dropin = request.config.pluginmanager.has_plugin("splice.testing.dropin")
    assert (type(kernel).__module__.startswith("splice")) == dropin


@pytest.mark.gpu
@pytest.mark.parametrize("func, exc, arch, param, said", REFUSED,
                         ids=[r[0].__name__ for r in REFUSED])
def test_refused_at_launch(torch, func, exc, arch, param, said):
    # ct.launch compiles for this GPU: refusals of another architecture do not apply
    major, minor = torch.cuda.get_device_capability()
    if arch != f"sm_{major}{minor}" and arch != "sm_90":
        pytest.skip(f"refused on {arch} only")
    dtype = {"array(float32)": torch.float32, "array(bfloat16)": torch.bfloat16}[param]
    x = torch.zeros(16, dtype=dtype, device="cuda")
    with pytest.raises(exc) as e:
        ct.launch(torch.cuda.current_stream(), (1,), ct.kernel(func), (x,))
    assert e.value.message.startswith(said)
