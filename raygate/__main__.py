"""``python -m raygate``: the ``raygate`` command."""

import sys

from raygate.server.cli import main

sys.exit(main())
