"""The API's JSON renderer, with its output fixed here rather than by the host's settings.

DRF's JSONRenderer reads UNICODE_JSON, COMPACT_JSON and STRICT_JSON from REST_FRAMEWORK when
it is imported; a host project that changed them would change every body the API sends. These
are DRF's defaults, which Cronfleet's clients see.
"""

from __future__ import annotations

from rest_framework import renderers


class JSONRenderer(renderers.JSONRenderer):
    ensure_ascii = False  # UNICODE_JSON: names and messages as they are, not \u escapes
    compact = True  # COMPACT_JSON
    strict = True  # STRICT_JSON: NaN or Infinity in a body is a bug, not a number
