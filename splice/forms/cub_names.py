"""Which ``splice.cub`` function a call site of one of :mod:`splice.cub`'s CUB templates is,
for messages: the user called ``splice.cub.sort(...)``, not ``splice_cub::sort_keys<...>``
(the forms read it; :mod:`splice.cub` itself imports the compiler)."""

from __future__ import annotations

import re

#: The splice.cub function of each template of splice.cub's source.
PUBLIC = {"sort_keys": "sort", "sort_pairs": "sort_pairs", "top_k": "top_k",
          "inclusive_sum": "inclusive_sum", "histogram": "histogram",
          # splice.cub's scans, reductions, merge sorts and runs (cub_sources.OPS_SOURCE)
          "exclusive_sum": "exclusive_sum", "inclusive_scan": "inclusive_scan",
          "exclusive_scan": "exclusive_scan", "reduce": "reduce", "merge_sort": "merge_sort",
          "merge_sort_pairs": "merge_sort_pairs", "flag_heads": "flag_heads",
          "flag_tails": "flag_tails", "unique_counts": "unique_counts",
          "run_length_decode": "run_length_decode"}


def call_of(label: str) -> tuple[str, str] | None:
    """(``splice.cub.<function>``, the user's call site) of a call site whose label
    (``SiteCall.label``: "splice_cub::sort_keys<float, false> (...) at k.py:12") is a
    splice.cub call; None for any other."""
    m = re.match(r"splice_cub::(\w+)<.* at (.+)$", label)
    if m is None or m.group(1) not in PUBLIC:
        return None
    return f"splice.cub.{PUBLIC[m.group(1)]}", m.group(2)
