"""The suite's scheduling list names files that exist: a renamed long file would
silently fall back to the end of the queue (tests/conftest.py, LONG_FILES)."""

from pathlib import Path

from tests.conftest import LONG_FILES

ROOT = Path(__file__).resolve().parents[2]


def test_every_long_file_named_for_scheduling_exists_once():
    missing = [path for path in LONG_FILES if not (ROOT / path).is_file()]
    assert not missing, missing
    assert len(set(LONG_FILES)) == len(LONG_FILES)
