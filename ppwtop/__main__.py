"""``python -m ppwtop``."""

from ppwtop.cli.main import entry

entry()
