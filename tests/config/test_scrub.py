"""judgeflow.config.scrub: credentials inside URLs, configured secrets by exact value,
key-shaped tokens; and log records scrubbed once it is installed."""

from __future__ import annotations

import logging
import uuid

from judgeflow.judge.litellm_judge import LiteLLMJudge
from judgeflow.config.scrub import install_log_scrubbing, register_settings, scrub, scrub_url, url_credentials
from judgeflow.config.settings import Settings


def test_userinfo_and_credential_query_values_are_masked_the_rest_stays():
    url = "https://alice:pa55w0rd@judge.example.com:8443/v1/chat?api-version=2024-06-01&api-key=abc123&sig=S1G&x=1"
    assert scrub_url(url) == "https://***@judge.example.com:8443/v1/chat?api-version=2024-06-01&api-key=***&sig=***&x=1"
    for name in ("key", "api-key", "api_key", "token", "sig", "signature", "access_token", "KEY"):
        assert scrub_url(f"http://h/p?{name}=s3cr3tvalue") == f"http://h/p?{name}=***"
    assert scrub_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert url_credentials(url) == ["alice", "pa55w0rd", "abc123", "S1G"]


def test_urls_inside_free_text_are_scrubbed():
    text = ("Connection error to 'https://u:hunter2hunter2@api.example.com/v1?token=tok-123456' "
            "(see /v1/models?access_token=abcdef)")
    out = scrub(text)
    assert "hunter2hunter2" not in out and "tok-123456" not in out and "abcdef" not in out
    assert "https://***@api.example.com/v1?token=***" in out


def test_key_shapes_and_registered_exact_values():
    azure = uuid.uuid4().hex  # 32 hex digits: no pattern could tell it from an id
    google = "AIza" + "Sy" + "B" * 33
    register_settings(Settings(_env_file=None, judge_api_key=azure))
    out = scrub(f"key {azure} rejected; also {google} and sk-proj-abcdefghij and Bearer xyz.abc123")
    assert azure not in out and google not in out and "sk-proj-abcdefghij" not in out and "xyz.abc123" not in out
    assert scrub("nothing secret here: trace-000123") == "nothing secret here: trace-000123"


def test_a_base_url_with_credentials_is_registered_whole_and_in_parts():
    tag = uuid.uuid4().hex[:10]
    base = f"https://judge-{tag}:pw-{tag}@llm.example.com/v1?api-key=q-{tag}"
    register_settings(Settings(_env_file=None, judge_api_base=base))
    out = scrub(f"failed: judge-{tag} pw-{tag} q-{tag} {base}")
    assert tag not in out


def test_userinfo_is_also_scrubbed_as_basic_auth_and_decoded_and_prose_is_left_alone():
    import base64

    tag = uuid.uuid4().hex[:8]
    register_settings(Settings(_env_file=None, judge_api_base=f"https://u-{tag}:p%40ss-{tag}@h.example.com/v1"))
    basic = base64.b64encode(f"u-{tag}:p@ss-{tag}".encode()).decode()
    out = scrub(f"Authorization: Basic {basic}; password p@ss-{tag}")
    assert basic not in out and f"p@ss-{tag}" not in out
    assert scrub("basic information about the bearer of bad news") == "basic information about the bearer of bad news"


def test_a_plain_base_url_is_not_treated_as_a_secret():
    register_settings(Settings(_env_file=None, judge_api_base="http://127.0.0.1:4321/v1"))
    assert scrub("calling http://127.0.0.1:4321/v1") == "calling http://127.0.0.1:4321/v1"


def test_the_judge_repr_masks_the_base_urls_credentials():
    judge = LiteLLMJudge("openai/x", api_base="https://user:p4ssw0rd@h.example.com/v1?key=k3y-value", api_key="sk-abcdefgh")
    shown = repr(judge)
    assert "p4ssw0rd" not in shown and "k3y-value" not in shown and "sk-abcdefgh" not in shown
    assert "h.example.com/v1" in shown


def test_log_records_are_scrubbed_once_installed(caplog):
    install_log_scrubbing()
    secret = f"canary-{uuid.uuid4().hex}"
    register_settings(Settings(_env_file=None, alert_webhook_secret=secret))
    log = logging.getLogger("judgeflow.test_scrub")
    with caplog.at_level(logging.INFO, logger="judgeflow.test_scrub"):
        log.info("posting to %s with %s", "https://a:b-password@x.example/hook?token=t0k3n", secret)
        try:
            raise RuntimeError(f"boom {secret}")
        except RuntimeError:
            log.exception("failed")
    text = caplog.text + "".join(r.exc_text or "" for r in caplog.records)
    assert secret not in text and "b-password" not in text and "t0k3n" not in text
    assert "https://***@x.example/hook?token=***" in text


def test_the_start_judge_task_returns_no_credentials():
    from judgeflow.tasks.scoring import start_judge

    settings = Settings(
        _env_file=None, judge_model="openai/x", judge_api_key="0123456789abcdef0123456789abcdef",
        judge_api_base="https://gw-user:gw-p4ss@gw.example.com/v1?api-key=q-s3cret", judge_processes=1,
    )
    judge = start_judge.fn(settings)
    shown = repr(judge)
    judge.close()
    assert shown.startswith("LiteLLMJudge(") and "gw.example.com/v1" in shown
    for secret in ("gw-user", "gw-p4ss", "q-s3cret", "0123456789abcdef0123456789abcdef"):
        assert secret not in shown

    # the default on more than one core: a pool of judge processes (not started here)
    from judgeflow.judge.pool.process_pool import JudgeProcessPool

    from judgeflow.judge.factory import judge_config

    pool = JudgeProcessPool(judge_config(settings.model_copy(update={"judge_processes": 2})))
    try:
        shown = repr(pool)
        assert shown.startswith("JudgeProcessPool(model='openai/x'")
        for secret in ("gw-user", "gw-p4ss", "q-s3cret", "0123456789abcdef0123456789abcdef"):
            assert secret not in shown
    finally:
        pool.close()


def test_a_database_role_name_is_not_masked_but_its_password_is():
    from judgeflow.config.scrub import registered

    settings = Settings(database_url="postgresql://judgeflow:db-p4ssw0rd@127.0.0.1:5432/app", judge_model="offline")
    register_settings(settings)
    assert "db-p4ssw0rd" in registered()
    assert "judgeflow" not in registered()
    assert scrub("judgeflow backfill --rescore, password db-p4ssw0rd") == "judgeflow backfill --rescore, password ***"


def test_a_secret_urls_path_and_its_token_segments_are_masked_its_words_stay():
    url = "https://hooks.slack.com/services/T0PATH1A/B0PATH2B/pathTokenAbcdefGhijklMnop"
    register_settings(Settings(_env_file=None, alert_slack_webhook_url=url))
    echoed = "404 no such hook: /services/T0PATH1A/B0PATH2B/pathTokenAbcdefGhijklMnop; try again"
    assert scrub(echoed) == "404 no such hook: ***; try again"
    alone = scrub("unknown team T0PATH1A, token pathTokenAbcdefGhijklMnop, see /services")
    assert alone == "unknown team ***, token ***, see /services"


def test_an_extra_urls_path_is_masked_too():
    url = "https://example.test/hooks/abc123XYZ/deliver"
    assert scrub("HTTP 404: no route /hooks/abc123XYZ/deliver", (url,)) == "HTTP 404: no route ***"
    assert scrub("segment abc123XYZ", (url,)) == "segment ***"
    assert scrub("see /hooks and deliver", (url,)) == "see /hooks and deliver"


def test_a_secret_url_whose_path_is_plain_words_leaves_those_words_readable():
    register_settings(Settings(_env_file=None, alert_webhook_url="https://alerts.example.com/judgeflow"))
    assert scrub("home is /home/judgeflow/.judgeflow") == "home is /home/judgeflow/.judgeflow"


def test_a_phoenix_url_is_named_by_scheme_host_and_port_only():
    from judgeflow.phoenix.annotations import check_access

    # nothing listens on port 9: the error names the endpoint without its path or query
    level, message = check_access("http://127.0.0.1:9/phoenix-pr3fix/?token=zzsecret1", None, timeout_s=2)
    assert level == "MISSING" and "http://127.0.0.1:9" in message
    assert "phoenix-pr3fix" not in message and "zzsecret1" not in message
