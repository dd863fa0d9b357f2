"""The public functions' docstrings give every parameter (an ``Args:`` entry), what they
return, what they raise and an example, as the house rules ask; checked against their
signatures (tests/test_docs_blocks.py runs the examples)."""

import inspect

import pytest

import splice
from support.docstrings import undocumented as _undocumented


@pytest.mark.parametrize("fn", [
    splice.compile, splice.build, splice.tile, splice.pointer, splice.parse_signature,
    splice.kernel_signature, splice.library, splice.export_kernel,
    splice.asm,
    splice.extern, splice.extern.from_ptx, splice.extern.from_ltoir, splice.extern.from_object,
    splice.Library.extern, splice.kernel.inspect, splice.export_pack, splice.import_pack,
], ids=lambda fn: fn.__qualname__)
def test_every_parameter_is_documented(fn):
    assert _undocumented(fn) == []
    doc = inspect.getdoc(fn)
    assert "Raises:" in doc and "Returns:" in doc
    # the example, run as printed by tests/test_docs_blocks.py (inspect's: the class's)
    assert "```python" in doc or fn is splice.kernel.inspect


def test_compile_documents_the_errors_it_raises():
    # a signature of the wrong type is a SpliceDeclarationError: the docstring says so
    from support import kernels as K
    with pytest.raises(splice.SpliceDeclarationError, match="signature must be a"):
        splice.compile(K.saxpy_kernel, "float32(float32)", "sm_90")
    assert "SpliceDeclarationError" in inspect.getdoc(splice.compile)


def test_asm_documents_its_refusals():
    # the errors a splice.asm call can raise, each with its cause (the refusals of
    # splice.asm_check and the warpgroup callee check included)
    doc = inspect.getdoc(splice.asm)
    raises = doc.split("Raises:", 1)[1]
    for error in ("SpliceCallError", "SpliceLinkError", "SpliceRewriteError",
                  "SpliceCompileError"):
        assert error in raises
    for cause in ("not written on every", ".shared", "barrier.sync 15, 128", "%ntid",
                  "pack not 1/2/4/8 (or a bool)"):
        assert cause in raises, cause
