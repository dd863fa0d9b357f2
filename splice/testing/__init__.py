"""Test helpers shipped with splice: :mod:`splice.testing.dropin`, a pytest plugin that runs
cuTile's own tests with every ``@ct.kernel`` a ``@splice.kernel``.

May import the driver and the integrations (what a user's code reaches through
``import splice``); nothing in splice imports it.
"""
