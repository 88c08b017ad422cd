"""``python -m morphz``: the command line, as the ``morphz`` script runs it."""

from morphz.interfaces.cli import run

run()
