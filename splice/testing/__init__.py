"""Test helpers shipped with splice: :mod:`splice.testing.dropin`, a pytest plugin that runs
cuTile's own tests with every ``@ct.kernel`` a ``@splice.kernel``."""
