"""``python -m raygate``: the ``raygate`` command."""

import sys

from raygate.extender.cli import main

sys.exit(main())
