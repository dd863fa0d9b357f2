"""cuTile tracing: a ``@splice.kernel``'s call sites as cuTile traces them.

:mod:`.trace` runs cuTile's front end with splice's call sites in it (the markers of
:mod:`splice.forms`), :mod:`.tile_ir` defines the Tile IR operations of those sites,
:mod:`.signatures` makes a ``KernelSignature`` from text (``splice.kernel_signature``).
cuTile's private API is reached only through :mod:`splice.system._cutile`.

May import: the forms (a site's marker), the PTX tools, :mod:`splice.types` and
:mod:`splice.system._cutile`; nothing of the input kinds or the driver.
"""
