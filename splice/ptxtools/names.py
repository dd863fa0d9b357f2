"""The names splice writes into a kernel's PTX, in one place.

Attributes:
    MARKER_PREFIX: the prefix of a call site's marker global (``__splice_marker_<index>``).
    MARKER_RE: matches a marker symbol; group 1 is the site's index.
    RESERVED_PREFIXES: the prefixes of the registers, parameters and labels splice's call
        sequences declare; a kernel's PTX that already uses one is refused
        (:func:`splice.forms.rewrite.splice_calls`).
"""

from __future__ import annotations

import re

MARKER_PREFIX = "__splice_marker_"
MARKER_RE = re.compile(re.escape(MARKER_PREFIX) + r"(\d+)\b")
RESERVED_PREFIXES = ("%__splice", "__splice_p", "__splice_r", "$__splice")


def marker_symbol(index: int) -> str:
    """The marker global of site ``index``."""
    return f"{MARKER_PREFIX}{index}"
