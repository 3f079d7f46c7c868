"""The trend: per-day rates overall and per top segment, change against the
baseline, the markdown (with its SVG picture) and `judgeflow report`."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from judgeflow.alerts.stats import fisher_greater
from judgeflow.alerts.trend import compute_trend, render_markdown, render_text, sparkline
from tests.alerts.helpers import add_results, make_settings

DAY = timedelta(days=1)


def _seed(engine):
    # app a: 10% for ten days, then 50% in the last 24 hours; app b: steady 0%
    for d in range(2, 12):
        add_results(engine, passed=9, not_passed=1, segment={"app": "a"}, age=d * DAY + timedelta(hours=1))
        add_results(engine, passed=5, segment={"app": "b"}, age=d * DAY + timedelta(hours=1))
    add_results(engine, passed=10, not_passed=10, segment={"app": "a"}, age=timedelta(hours=1))
    add_results(engine, passed=5, segment={"app": "b"}, age=timedelta(hours=1))
    add_results(engine, "hallucination", passed=3, segment={"app": "c"}, age=timedelta(hours=1))


def test_trend_per_day_and_change_against_baseline(engine, database_url):
    _seed(engine)
    settings = make_settings(database_url, alert_segment_by="app")
    with engine.connect() as conn:
        now = conn.execute(sa.select(sa.func.now())).scalar_one()
        trend = compute_trend(conn, settings, days=14, now=now)
    assert len(trend.dates) == 14 and trend.until == now.date()
    tox = {s.label: s for s in trend.for_metric("toxicity")}
    assert list(tox) == ["overall", "app=a", "app=b"]
    a = tox["app=a"]
    assert sum(n for _, n in a.days[-2:]) == 20  # the last 24 hours (one or two UTC days)
    assert sum(bad for bad, _ in a.days) == 20 and a.total == 120
    # the change: last 24h (10/20) against the 7 days before (days 2..7 ago: 6/60)
    c = a.change
    assert (c.violations, c.sample_size, c.baseline_violations, c.baseline_sample_size) == (10, 20, 6, 60)
    assert c.increase == pytest.approx(0.5 - 0.1)
    assert c.p_value == pytest.approx(fisher_greater(10, 20, 6, 60))
    assert tox["app=b"].change.increase == 0
    assert [s.label for s in trend.for_metric("hallucination")] == ["overall", "app=c"]

    md = render_markdown(trend)
    images = re.findall(r"!\[(\w+) trend\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)", md)
    assert [name for name, _ in images] == ["toxicity", "hallucination"]
    svg = ET.fromstring(base64.b64decode(images[0][1]))  # well-formed SVG
    assert svg.tag.endswith("svg") and len(svg.findall(".//{http://www.w3.org/2000/svg}polyline")) >= 2
    assert "| app=a |" in md and "+40.0 pts" in md

    text = render_text(trend)
    line = next(line for line in text.splitlines() if line.startswith("app=a"))
    assert "+40.0 pts" in line and "20 / 60" in line and "█" in line


def test_sparkline_scale_and_gaps():
    assert sparkline([0.0, 0.05, 0.1, None], 0.1) == "▁▅█·"
    assert sparkline([None, None], 0.0) == "··"


def _report_seeded(engine, database_url, monkeypatch, tmp_path, *args: str):
    """`judgeflow report ARGS` over the seeded results: its output (exit 0 asserted)."""
    from judgeflow.cli import app

    _seed(engine)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", database_url)
    result = CliRunner().invoke(app, ["report", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_report_command(engine, database_url, monkeypatch, tmp_path):
    from judgeflow.cli import app

    lines = _report_seeded(engine, database_url, monkeypatch, tmp_path, "--since", "7d", "--segment", "app"
                           ).splitlines()
    assert any(line.startswith("toxicity (sparkline") for line in lines)
    a = next(line for line in lines if line.startswith("app=a"))
    # 7 days: seven characters of sparkline
    assert re.search(r"app=a\s+\S{7}\s", a), a
    assert "+40.0 pts" in a
    # without --segment and without JUDGEFLOW_ALERT_SEGMENT_BY: overall only
    result = CliRunner().invoke(app, ["report"])
    assert result.exit_code == 0 and "app=a" not in result.output and "overall" in result.output


def test_a_long_period_is_bucketed_into_at_most_60_characters():
    from judgeflow.alerts.trend import MAX_BUCKETS, Series, buckets, days_per_bucket

    assert days_per_bucket(14) == 1 and days_per_bucket(60) == 1 and days_per_bucket(61) == 2
    assert days_per_bucket(36500) == 609
    for n in (1, 14, 60, 61, 365, 36500):
        parts = buckets(n, days_per_bucket(n))
        assert len(parts) <= MAX_BUCKETS and [d for part in parts for d in part] == list(range(n))
        assert len(parts[-1]) == days_per_bucket(n)  # the newest bucket is whole, ending today
    # a bucket's rate is its days' results together, not the mean of their rates
    s = Series("toxicity", {}, [(1, 1), (0, 9), (0, 0), (5, 10)])
    assert s.bucket_rates(2) == [0.1, 0.5]


def test_report_of_a_century_prints_no_line_wider_than_its_table(engine, database_url, monkeypatch, tmp_path):
    output = _report_seeded(engine, database_url, monkeypatch, tmp_path, "--since", "36500d", "--segment", "app")
    lines = output.splitlines()
    # the table's width: its 60 sparkline characters and ten columns (the corrected rate's among them)
    assert max(map(len, lines)) < 220, max(lines, key=len)
    a = next(line for line in lines if line.startswith("app=a"))
    assert re.search(r"app=a\s+·{59}█\s", a), a  # 60 characters of 609 days; the newest holds the data
    assert "per 609 days" in output
