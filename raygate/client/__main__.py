"""``python -m raygate.client``."""

from raygate.client.cli import main

raise SystemExit(main())
