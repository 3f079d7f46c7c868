from datetime import date

from judgeflow.sampling.planner import NightPlan, StratumRow
from judgeflow.sampling.table import plan_markdown, plan_text


def _plan():
    return NightPlan(date(2026, 11, 26), 6.0, 0.0, 60.0, True, [
        StratumRow("app=big", 5000, 500, 5.0, 0.1, 0.012),
        StratumRow("app=small", 120, 50, 0.5, 50 / 120, 0.09, spent_usd=0.47),
        StratumRow("app=tiny", 80, 30, 0.3, 0.375, None, "the budget cannot pay for every minimum"),
    ])


def test_the_plan_text_names_each_stratum_and_the_short_ones():
    text = plan_text(_plan())
    assert text.splitlines()[0] == ("night 2026-11-26: sample budget $6.0000; judging all 5200 new traces costs "
                                    "$60.0000")
    big = next(line for line in text.splitlines() if line.startswith("app=big"))
    assert big.split() == ["app=big", "5000", "500", "$5.0000", "+1.2", "pts"]
    assert "n/a (too few to decide)" in text
    assert "stratum app=tiny: 30 of 80 judged, fewer than the minimum: the budget cannot pay" in text


def test_the_artifact_shows_what_was_spent():
    md = plan_markdown(_plan())
    assert "| stratum | traffic | to judge | est. cost | smallest rise detected (80% power) | spent |" in md
    assert "| app=small | 120 | 50 | $0.5000 | +9.0 pts | $0.4700 |" in md
    assert "| app=big | 5000 | 500 | $5.0000 | +1.2 pts | - |" in md
    assert "- sample budget $6.0000: judging 580 of 5200 new traces" in md


def test_the_plan_names_the_strata_that_could_not_get_the_power_they_need():
    plan = _plan()
    plan.rows.append(StratumRow("app=mid", 1200, 90, 0.9, 0.075, 0.08,
                                power_short="213 judged results are needed to see a rise of 5.0 pts with 80% power"))
    text = plan_text(plan)
    assert "stratum app=mid: 90 of 1200 judged: 213 judged results are needed to see a rise of 5.0 pts" in text
    assert "- stratum app=mid: 90 of 1200 judged: 213 judged results are needed" in plan_markdown(plan)
