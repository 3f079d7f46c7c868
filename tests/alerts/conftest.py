"""Fixtures the alert tests share: the results database migrated, and a
webhook receiver that records what was sent."""

from __future__ import annotations

import pytest

from tests.alerts.helpers import migrated
from tests.support.webhook_receiver import WebhookReceiver


@pytest.fixture
def engine(db):
    return migrated(db)


@pytest.fixture
def hook():
    with WebhookReceiver() as receiver:
        yield receiver
