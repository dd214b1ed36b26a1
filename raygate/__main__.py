"""``python -m raygate``: the ``raygate`` command."""

import sys

from raygate.cli import main

sys.exit(main())
