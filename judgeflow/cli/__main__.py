"""``python -m judgeflow.cli``: the ``judgeflow`` command."""

from judgeflow.cli import main

if __name__ == "__main__":  # a judge worker process imports this module too (multiprocessing)
    main()
