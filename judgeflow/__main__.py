"""``python -m judgeflow``: the ``judgeflow`` command."""

from judgeflow.launcher import main

main()
