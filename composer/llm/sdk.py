"""Loading litellm the one way Composer does: on first use (it takes seconds), with no price-map download.

Below both the client and the bounded transport, which each need the same configured module.
"""

from __future__ import annotations

import os
from typing import Any


def load_litellm() -> Any:
    """The litellm module, imported (once, by Python's module cache) with its local cost map and quiet."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-map download at import
    import litellm

    litellm.suppress_debug_info = True
    return litellm
