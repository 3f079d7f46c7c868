"""The peer benchmark refuses to time a deepeval whose requirements the venv breaks."""

from __future__ import annotations

from importlib import metadata

import pytest

from bench.peer import unmet_peer_requirements


@pytest.fixture
def installed(monkeypatch):
    versions: dict[str, str] = {}
    declared: list[str] = []

    def version(name: str) -> str:
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    def requires(name: str) -> list[str]:
        if name != "deepeval" or "deepeval" not in versions:
            raise metadata.PackageNotFoundError(name)
        return declared

    monkeypatch.setattr(metadata, "version", version)
    monkeypatch.setattr(metadata, "requires", requires)
    return versions, declared


def test_deepeval_with_its_own_pins_is_accepted(installed):
    versions, declared = installed
    versions.update(deepeval="4.3.1", rich="14.3.4", click="8.3.3")
    declared += ["rich<15.0.0,>=13.6.0", "click<8.4.0,>=8.0.0", 'pytest-xdist; extra == "dev"']
    assert unmet_peer_requirements() == []


def test_a_reinstalled_lock_over_deepeval_is_named(installed):
    versions, declared = installed
    versions.update(deepeval="4.3.1", rich="15.0.0", click="8.5.1")
    declared += ["rich<15.0.0,>=13.6.0", "click<8.4.0,>=8.0.0", "tenacity"]
    assert unmet_peer_requirements() == [
        "rich 15.0.0 is not <15.0.0,>=13.6.0", "click 8.5.1 is not <8.4.0,>=8.0.0", "tenacity is missing",
    ]


def test_no_deepeval_is_named(installed):
    assert unmet_peer_requirements() == ["deepeval is not installed"]
