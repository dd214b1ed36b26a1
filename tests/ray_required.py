"""Whether the tests that drive the real Ray autoscaler run here: Ray is installed, or
``make test-ray`` (CI) asks for it (``RAYGATE_REQUIRE_RAY``), in which case a missing Ray
fails their import instead of skipping them. Such a test module starts::

    if RAY_MISSING:
        pytest.skip(RAY_MISSING, allow_module_level=True)
"""

from __future__ import annotations

import importlib.util
import os

RAY_MISSING = ("Ray is not installed: `make test-ray` installs raygate[ray] and runs these"
               if importlib.util.find_spec("ray") is None
               and not os.environ.get("RAYGATE_REQUIRE_RAY") else "")
