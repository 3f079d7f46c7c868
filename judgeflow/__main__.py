"""``python -m judgeflow``: the ``judgeflow`` command."""

from judgeflow.cli import main

main()
