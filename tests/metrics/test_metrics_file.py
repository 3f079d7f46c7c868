"""JUDGEFLOW_METRICS_FILE: every field checked (one line naming the file,
the metric and the field, exit 2, nothing judged), the metrics served beside
the built-ins with their origin, and `judgeflow metrics [--check FILE]`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from judgeflow.errors import ConfigError
from judgeflow.metrics.geval.file import load_metrics_file
from judgeflow.run.metric_door import open_metrics
from tests.support.builtins import BUILT_IN, and_rates
from judgeflow.metrics.registry import metric_names, origin_of, registered, served_file

runner = CliRunner()

GOOD = '''
[metrics.helpfulness]
criteria = "The reply helps the user with what they asked instead of refusing."
evaluation_steps = ["Read what the user asked.", "Decide whether the reply helps with it or refuses it."]
inputs = ["input", "output"]
threshold = 0.5
rate_max = 0.10

[metrics.grounded]
criteria = "Every claim of the reply is supported by the context."
inputs = ["output", "context"]
regression = true
strict_mode = 1
model = "openai/gpt-4o"
'''


@pytest.fixture(autouse=True)
def no_file_metrics_after():
    yield
    open_metrics(None)
    assert list(metric_names()) == [*BUILT_IN]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "metrics.toml"
    path.write_text(text, encoding="utf-8")
    return path


def with_field(field: str, value: str, *, drop: str | None = None) -> str:
    lines = ['[metrics.helpfulness]', 'criteria = "Helps."', 'inputs = ["input", "output"]']
    lines = [line for line in lines if drop is None or not line.startswith(drop)]
    return "\n".join(lines + ([f"{field} = {value}"] if field else [])) + "\n"


@pytest.mark.parametrize("text, expected", [
    (with_field("", "", drop="criteria"), "metric helpfulness: criteria: missing"),
    (with_field("", "", drop="inputs") + 'inputs = ["input", "answer"]\n',
     "metric helpfulness: inputs: unknown input 'answer'; choose from input, output, context"),
    (with_field("", "", drop="inputs") + 'inputs = ["input"]\n', "metric helpfulness: inputs: must include 'output'"),
    (with_field("threshold", "1.5"), "metric helpfulness: threshold: must be from 0 to 1, got 1.5"),
    (with_field("threshold", "-0.1"), "metric helpfulness: threshold: must be from 0 to 1"),
    (with_field("threshold", '"high"'), "metric helpfulness: threshold: must be a number from 0 to 1, got text"),
    (with_field("rate_max", "2"), "metric helpfulness: rate_max: must be from 0 to 1, got 2"),
    (with_field("strict_mode", "2"), "metric helpfulness: strict_mode: must be 0 or 1, got 2"),
    (with_field("rate_on", '"truth"'), 'metric helpfulness: rate_on: must be "judged" or "corrected", got \'truth\''),
    (with_field("regression", "0"), "metric helpfulness: regression: a rise of 0 would page on noise"),
    (with_field("evaluation_steps", "[]"), "metric helpfulness: evaluation_steps: must be a list of non-empty"),
    (with_field("evaluation_steps", '"one step"'), "metric helpfulness: evaluation_steps: must be a list"),
    (with_field("criteria_", '"x"'), "metric helpfulness: criteria_: unknown field; the fields are criteria,"),
    (with_field("model", '"gpt 4o"'), "metric helpfulness: model: a litellm model name has no spaces, got 'gpt 4o'"),
    (with_field("model", '""'), "metric helpfulness: model: must not be empty"),
    (with_field("model", "4"), "metric helpfulness: model: must be text, got a number"),
    (with_field("model", '"offline"'), "metric helpfulness: model: the offline judge has no rubric for a file metric"),
    (with_field("segment_by", '"tier"'), 'metric helpfulness: segment_by: must be a list of metadata keys, e.g. '
                                         '["tier"] ([]: overall only), got text'),
    (with_field("segment_by", '["tier", 3]'), "metric helpfulness: segment_by: must be a list of metadata keys"),
    (with_field("segment_by", '[""]'), "metric helpfulness: segment_by: bad key '': a metadata key of 1 to 100"),
    (with_field("segment_by", '[" tier"]'), "metric helpfulness: segment_by: bad key ' tier': a metadata key of"),
    (with_field("segment_by", '["t" ]'.replace("t", "t" * 101)), "metric helpfulness: segment_by: bad key"),
    (with_field("segment_by", '["app,tier"]'), "metric helpfulness: segment_by: bad key 'app,tier': no ',', '='"),
    (with_field("segment_by", '["tier=gold"]'), "metric helpfulness: segment_by: bad key 'tier=gold': no ','"),
    (with_field("segment_by", '["ti\\u0000er"]'), "metric helpfulness: segment_by: bad key 'ti\\x00er': no ','"),
    (with_field("segment_by", '["tier", "tier"]'), "metric helpfulness: segment_by: names a key twice"),
    (with_field("segment_by", str([f"k{i}" for i in range(9)]).replace("'", '"')),
     "metric helpfulness: segment_by: at most 8 keys, got 9"),
    (with_field("", "", drop="criteria") + 'criteria = 3\n', "metric helpfulness: criteria: must be text, got a "
                                                            "number"),
    (with_field("", "", drop="criteria") + 'criteria = "  "\n', "metric helpfulness: criteria: must not be empty"),
    ('[metrics.toxicity]\ncriteria = "x"\n', "metric toxicity: clashes with a built-in or plugin metric"),
    ('[metrics.Helpful-ness]\ncriteria = "x"\n', "metric Helpful-ness: bad metric name"),
    ('[metrics.helpfulness]\ncriteria = "x"\n[other]\na = 1\n', "other: unknown key; a metrics file holds"),
    ('[metrics.helpfulness\ncriteria = "x"\n', "not valid TOML:"),
    ('metrics = 3\n', "metrics: must be tables"),
])
def test_each_bad_field_is_one_line_naming_the_file_metric_and_field(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load_metrics_file(path)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and expected in message, message


def test_a_metrics_own_segment_keys_replace_the_global_ones_for_its_rules_only(tmp_path):
    """segment_by: its two rules per its keys ([]: overall only), the other metrics' and the judge failure rate's
    per JUDGEFLOW_ALERT_SEGMENT_BY's; every result stores the union; not part of its version."""
    from judgeflow.alerts.rules import all_rules
    from judgeflow.config.settings import Settings

    plain = write(tmp_path, GOOD)
    open_metrics(plain)
    version = registered()["helpfulness"].version
    path = write(tmp_path, GOOD.replace("rate_max = 0.10\n", 'rate_max = 0.10\nsegment_by = ["tier", "plan"]\n')
                 .replace("strict_mode = 1\n", "strict_mode = 1\nsegment_by = []\n"))
    open_metrics(path)
    settings = Settings(_env_file=None, metrics_file=path, alert_segment_by="app,tier")
    assert (registered()["helpfulness"].segment_by, registered()["grounded"].segment_by) == (("tier", "plan"), ())
    assert registered()["helpfulness"].version == version
    assert {r.name: r.segment_by for r in all_rules(settings) if r.kind in ("not_passed_rate", "regression",
                                                                                "failure_rate")} == {
        **{f"{name}_{kind}": ("app", "tier") for name in and_rates(*BUILT_IN) for kind in ("rate", "regression")},
        # a session rate's rules segment as its trace metric's
        **{f"{name}_{kind}": ("tier", "plan") for name in and_rates("helpfulness") for kind in ("rate", "regression")},
        **{f"{name}_{kind}": () for name in and_rates("grounded") for kind in ("rate", "regression")},
        "judge_failure_rate": ("app", "tier")}
    assert settings.stored_segment_keys == ("app", "tier", "plan")
    assert settings.metric_segment_keys("toxicity") == ("app", "tier")
    # without the file: the global keys alone are stored
    assert Settings(_env_file=None, alert_segment_by="app").stored_segment_keys == ("app",)


def test_a_segment_key_a_source_presets_traces_do_not_carry_is_one_line(tmp_path):
    """The litellm and Phoenix presets' metadata has fixed keys: another would segment nothing."""
    from judgeflow.config.settings import PRESET_METADATA_KEYS, Settings

    path = write(tmp_path, with_field("segment_by", '["team_id", "tier"]'))
    with pytest.raises(ConfigError) as error:
        Settings(_env_file=None, metrics_file=path, source="litellm")
    assert str(error.value) == (f"{path}: metric helpfulness: segment_by: unknown metadata key 'tier': the litellm "
                                f"source's traces carry {', '.join(PRESET_METADATA_KEYS['litellm'])}")
    path = write(tmp_path, with_field("segment_by", '["team_id", "end_user"]'))
    assert Settings(_env_file=None, metrics_file=path, source="litellm").metric_segment_keys("helpfulness") == (
        "team_id", "end_user")
    # a table's metadata is the user's own: any key
    assert Settings(_env_file=None, metrics_file=write(tmp_path, with_field("segment_by", '["tier"]')),
                    source="table").stored_segment_keys == ("tier",)


def test_the_presets_metadata_keys_are_those_their_traces_carry():
    from judgeflow.config.settings import PRESET_METADATA_KEYS
    from judgeflow.sources.phoenix import trace_of as phoenix_trace
    from judgeflow.sources.litellm import trace_of as litellm_trace

    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    # every column the presets read into metadata, each with a value (a key without one is left out)
    litellm = litellm_trace({"request_id": "r1", "created_at": now, "messages": [], "response": {}, **{
        column: "x" for column in ("model", "model_group", "team_id", "end_user", "user", "call_type", "status",
                                   "session_id")}, "request_tags": ["a"]})
    phoenix = phoenix_trace({"span_id": "s1", "created_at": now, "attributes": {}, **{
        column: "x" for column in ("project", "trace_id", "name", "model", "status_code")}})
    assert tuple(litellm.metadata) == PRESET_METADATA_KEYS["litellm"]
    assert tuple(phoenix.metadata) == PRESET_METADATA_KEYS["phoenix"]


def test_an_unreadable_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"JUDGEFLOW_METRICS_FILE .*missing.toml: cannot read it"):
        load_metrics_file(tmp_path / "missing.toml")


def test_the_door_serves_the_file_metrics_beside_the_built_ins_with_the_files_values(tmp_path):
    from judgeflow.config.settings import Settings

    path = write(tmp_path, GOOD)
    settings = Settings(metrics_file=path)
    assert list(settings.metric_specs()) == and_rates(*BUILT_IN, "helpfulness", "grounded")
    assert list(metric_names()) == [*BUILT_IN]  # building settings serves nothing
    open_metrics(path)
    assert list(metric_names()) == [*BUILT_IN, "helpfulness", "grounded"]
    assert [origin_of(n) for n in metric_names()] == ["built-in", "built-in", "file", "file"]
    assert served_file() == str(path)
    helpfulness, grounded = settings.metric("helpfulness"), settings.metric("grounded")
    assert (helpfulness.threshold, helpfulness.rate_max, helpfulness.regression_min_increase,
            helpfulness.strict_mode) == (0.5, 0.10, None, False)
    assert (grounded.threshold, grounded.rate_max, grounded.regression_min_increase, grounded.strict_mode) == (
        0.5, None, 0.05, True)
    assert registered()["grounded"].fields == ("output", "context")
    # its own judge model; the other is judged by the run's
    assert (registered()["grounded"].judge_model, registered()["helpfulness"].judge_model) == ("openai/gpt-4o", None)
    assert registered()["helpfulness"].higher_is_better and not registered()["toxicity"].higher_is_better
    # keyword arguments win over the file, as over the environment
    assert Settings(metrics_file=path, helpfulness_threshold=0.8).metric("helpfulness").threshold == 0.8
    # settings without the file read none of its metrics; the door opened without it serves none
    assert list(Settings().metric_specs()) == and_rates(*BUILT_IN)
    open_metrics(None)
    assert list(metric_names()) == [*BUILT_IN]


def test_a_metric_removed_from_the_file_is_no_longer_served(tmp_path):
    from judgeflow.config.settings import Settings

    path = write(tmp_path, GOOD)
    open_metrics(path)
    path.write_text(GOOD.split("[metrics.grounded]")[0], encoding="utf-8")
    open_metrics(path)
    assert list(metric_names()) == [*BUILT_IN, "helpfulness"]
    assert list(Settings(metrics_file=path).metric_specs()) == and_rates(*BUILT_IN, "helpfulness")


def test_a_bad_file_stops_a_command_before_anything_is_judged(tmp_path, monkeypatch, judge_server):
    from judgeflow.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(write(tmp_path, with_field("threshold", "1.5"))))
    monkeypatch.setenv("JUDGEFLOW_JUDGE_API_BASE", judge_server.url)
    monkeypatch.setenv("JUDGEFLOW_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    result = runner.invoke(app, ["score", "--limit", "1"])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert "metrics.toml: metric helpfulness: threshold: must be from 0 to 1, got 1.5" in line
    assert judge_server.calls() == 0


def test_metrics_check_validates_without_judging(tmp_path):
    from judgeflow.cli import app

    good = runner.invoke(app, ["metrics", "--check", str(write(tmp_path, GOOD))])
    assert good.exit_code == 0, good.output
    assert good.output.strip() == f"{tmp_path / 'metrics.toml'}: 2 metric(s) usable: helpfulness, grounded"
    assert list(metric_names()) == [*BUILT_IN]  # checked, not served
    bad = runner.invoke(app, ["metrics", "--check", str(write(tmp_path, '[metrics.toxicity]\ncriteria = "x"\n'))])
    assert bad.exit_code == 2
    (line,) = bad.output.strip().splitlines()
    assert "metric toxicity: clashes with a built-in or plugin metric" in line


def test_metrics_check_warns_of_a_model_litellm_cannot_price(tmp_path):
    """As an unpriced JUDGEFLOW_JUDGE_MODEL: usable (exit 0), its cost unknown, one warning line naming it."""
    from judgeflow.cli import app

    path = write(tmp_path, GOOD.replace('"openai/gpt-4o"', '"openai/our-own-finetune"'))
    result = runner.invoke(app, ["metrics", "--check", str(path)])
    assert result.exit_code == 0, result.output
    usable, warning = result.output.strip().splitlines()
    assert usable == f"{path}: 2 metric(s) usable: helpfulness, grounded"
    assert warning == (f"{path}: metric grounded: model: warning: litellm has no price for 'openai/our-own-finetune': "
                       "its results' cost stays unknown, and a run, sample or calibration budget refuses to start")
    priced = runner.invoke(app, ["metrics", "--check", str(write(tmp_path, GOOD))])
    assert len(priced.output.strip().splitlines()) == 1  # gpt-4o is in litellm's price map: no warning


def test_a_metric_model_of_another_provider_never_carries_the_judge_key_elsewhere(tmp_path):
    """Without a judge base, litellm finds the host from the provider: the judge's key would go there."""
    from judgeflow.config.settings import load_settings

    path = write(tmp_path, GOOD.replace('"openai/gpt-4o"', '"anthropic/claude-3-5-haiku-20241022"'))
    with pytest.raises(ConfigError) as error:
        load_settings(metrics_file=path, judge_model="openai/gpt-4o-mini", judge_api_key="sk-test")
    assert str(error.value).startswith("metric grounded: its judge model 'anthropic/claude-3-5-haiku-20241022' is "
                                       "another provider's than JUDGEFLOW_JUDGE_MODEL 'openai/gpt-4o-mini'")
    assert "sk-test" not in str(error.value)
    # one base for every model (the judge's endpoint), the same provider, or no judge key: allowed
    load_settings(metrics_file=path, judge_model="openai/gpt-4o-mini", judge_api_key="sk-test",
                  judge_api_base="https://llm.example.com/v1")
    load_settings(metrics_file=path, judge_model="anthropic/claude-3-opus-20240229", judge_api_key="sk-test")
    load_settings(metrics_file=path, judge_model="openai/gpt-4o-mini")


def test_metrics_lists_every_metric_with_origin_version_inputs_and_rules(tmp_path, monkeypatch):
    from judgeflow.cli import app
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(write(tmp_path, GOOD)))
    result = runner.invoke(app, ["metrics", "--json"])
    assert result.exit_code == 0, result.output
    listing = json.loads(result.output)
    rows = {row["name"]: row for row in listing["metrics"]}
    assert list(rows) == [*BUILT_IN, "helpfulness", "grounded"]
    assert rows["toxicity"]["origin"] == "built-in" and rows["toxicity"]["rules"] == ["toxicity_rate max 5%"]
    helpfulness = rows["helpfulness"]
    assert (helpfulness["origin"], helpfulness["inputs"], helpfulness["rules"], helpfulness["passes"]) == (
        "file", ["input", "output"], ["helpfulness_rate max 10%"], "score >= 0.5")
    assert helpfulness["version"] == registered()["helpfulness"].version
    assert helpfulness["version"].startswith("helpfulness/1+") and "pending" not in helpfulness["version"]
    assert rows["grounded"]["rules"] == ["grounded_regression +5%"]
    assert rows["grounded"]["version"] == "grounded/1+steps-pending"  # written by the judge at the first run
    # the model that judges each: the run's, or the metric's own; an offline run judges every metric offline
    def models() -> dict[str, str]:
        listed = json.loads(runner.invoke(app, ["metrics", "--json"]).output)["metrics"]
        return {row["name"]: row["judge_model"] for row in listed}

    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "offline")
    assert models() == dict.fromkeys(rows, "offline")
    monkeypatch.setenv("JUDGEFLOW_JUDGE_MODEL", "openai/gpt-4o-mini")
    assert models() == {**dict.fromkeys(BUILT_IN, "openai/gpt-4o-mini"), "helpfulness": "openai/gpt-4o-mini",
                        "grounded": "openai/gpt-4o"}
    text = runner.invoke(app, ["metrics"]).output
    assert f"metrics file: {tmp_path / 'metrics.toml'}" in text
    assert any(line.startswith("helpfulness") and " file " in line and "helpfulness_rate max 10%" in line
               and "judged by openai/gpt-4o-mini;" in line for line in text.splitlines()), text
    assert any(line.startswith("grounded") and "judged by openai/gpt-4o;" in line for line in text.splitlines())


def test_metrics_lists_each_metrics_segment_keys(tmp_path, monkeypatch):
    from judgeflow.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUDGEFLOW_ALERT_SEGMENT_BY", "app")
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(write(tmp_path, GOOD.replace(
        "rate_max = 0.10\n", 'rate_max = 0.10\nsegment_by = ["tier"]\n').replace(
        "strict_mode = 1\n", "strict_mode = 1\nsegment_by = []\n"))))
    result = runner.invoke(app, ["metrics", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: (row["segment_by"], row["segment_by_own"]) for row in json.loads(result.output)["metrics"]}
    assert rows == {**dict.fromkeys(BUILT_IN, (["app"], False)), "helpfulness": (["tier"], True),
                    "grounded": ([], True)}
    lines = {line.split()[0]: line for line in runner.invoke(app, ["metrics"]).output.splitlines()
             if line and not line.startswith("metrics file")}
    assert lines["helpfulness"].endswith("; rules per tier (its own segment_by)")
    assert lines["grounded"].endswith("; rules overall only (its own segment_by)")
    assert lines["toxicity"].endswith("; rules per app (JUDGEFLOW_ALERT_SEGMENT_BY)")
    bad = runner.invoke(app, ["metrics", "--check", str(write(tmp_path, with_field("segment_by", '["a=b"]')))])
    assert bad.exit_code == 2
    (line,) = bad.output.strip().splitlines()
    assert "metrics.toml: metric helpfulness: segment_by: bad key 'a=b'" in line
    # a key the source preset's traces do not carry: the command stops at its settings
    monkeypatch.setenv("JUDGEFLOW_SOURCE", "litellm")
    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(write(tmp_path, with_field("segment_by", '["tier"]'))))
    unknown = runner.invoke(app, ["metrics"])
    assert unknown.exit_code == 2
    (line,) = unknown.output.strip().splitlines()
    assert ("metrics.toml: metric helpfulness: segment_by: unknown metadata key 'tier': the litellm source's traces "
            "carry model, model_group,") in line, line


def test_metrics_lists_the_version_runs_score_with_once_the_judge_wrote_the_steps(
        judgeflow_env, db, tmp_path, monkeypatch):
    from judgeflow.cli import app
    from judgeflow.db import migrate
    from judgeflow.db.prepared import store
    from judgeflow.metrics.geval.metric import GEvalDefinition, geval_version

    monkeypatch.setenv("JUDGEFLOW_METRICS_FILE", str(write(tmp_path, GOOD)))
    migrate.upgrade(db)

    def listing() -> dict:
        result = runner.invoke(app, ["metrics", "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    before = listing()
    assert {row["name"]: row["version"] for row in before["metrics"]}["grounded"] == "grounded/1+steps-pending"
    assert before["note"] == "grounded: evaluation steps not written yet (the next run asks the judge once)"

    steps = ["Find each claim of the reply.", "Check each claim against the context."]
    with db.begin() as conn:  # as the first run stores what the judge wrote
        store(conn, "grounded", registered()["grounded"].prepare.key, steps, "openai/gpt-4o")
    open_metrics(None)  # a new command: nothing handed over in this process yet
    after = listing()
    version = {row["name"]: row["version"] for row in after["metrics"]}["grounded"]
    assert after["note"] is None, after
    # the prompt hash with the stored steps: what the metric scores with from now on
    grounded = GEvalDefinition(name="grounded", criteria="Every claim of the reply is supported by the context.",
                               inputs=("output", "context"))
    assert version == geval_version(grounded, tuple(steps)) != geval_version(grounded, ("another step",))


def test_a_file_metrics_rate_rule_may_decide_on_the_corrected_rate(tmp_path):
    """rate_on: the file's, as its other rule fields are (default judged); every other rule stays judged."""
    from judgeflow.alerts.rules import all_rules
    from judgeflow.config.settings import Settings

    path = write(tmp_path, GOOD.replace("rate_max = 0.10\n", 'rate_max = 0.10\nrate_on = "corrected"\n'))
    open_metrics(path)
    settings = Settings(_env_file=None, metrics_file=path, toxicity_rate_on="corrected")
    on = {r.name: r.rate_on for r in all_rules(settings)}
    assert (on["helpfulness_rate"], on["grounded_rate"], on["toxicity_rate"]) == ("corrected", "judged", "corrected")
    assert on["helpfulness_regression"] == on["hallucination_rate"] == "judged"
