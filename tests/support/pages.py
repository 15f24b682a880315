"""What a served page loads from elsewhere (no database, no side effect on import)."""

from __future__ import annotations

import re

# A script, style sheet or image the page loads from another host (an absolute or scheme-relative
# URL), such as a CDN's. Not the word "cdn" anywhere: the page's random CSRF token may spell it.
ELSEWHERE = re.compile(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", re.IGNORECASE)


def assets_elsewhere(page: str) -> list[str]:
    return ELSEWHERE.findall(page)
