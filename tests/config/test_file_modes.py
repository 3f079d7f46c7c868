"""A .env holding a key that other local users can read (judgeflow/config/file_modes.py):
said once by the settings, with the fix, naming variables and never their values."""

from __future__ import annotations

import logging
import os

from judgeflow.config.file_modes import key_file_warning

SECRET = ["JUDGEFLOW_JUDGE_API_KEY", "JUDGEFLOW_DATABASE_URL"]


def test_a_dotenv_with_a_key_open_to_others_is_warned_of_and_a_private_or_keyless_one_is_not(tmp_path):
    path = tmp_path / ".env"
    path.write_text("JUDGEFLOW_JUDGE_MODEL=gpt-4o\nJUDGEFLOW_JUDGE_API_KEY=sk-very-secret\n"
                    "OPENAI_API_KEY=sk-other\nPREFECT_API_KEY=\n")
    os.chmod(path, 0o644)
    assert key_file_warning(path, SECRET) == (
        f"{path} holds JUDGEFLOW_JUDGE_API_KEY, OPENAI_API_KEY and other local users can read it (mode 0644): "
        f"chmod 600 {path}")
    os.chmod(path, 0o640)  # the group alone is enough
    assert "(mode 0640)" in key_file_warning(path, SECRET)
    os.chmod(path, 0o600)
    assert key_file_warning(path, SECRET) is None
    path.write_text("JUDGEFLOW_JUDGE_MODEL=gpt-4o\nJUDGEFLOW_JUDGE_API_KEY=\n")  # no key in it
    os.chmod(path, 0o644)
    assert key_file_warning(path, SECRET) is None
    assert key_file_warning(tmp_path / "missing.env", SECRET) is None


def test_the_settings_warn_once_of_the_working_directorys_dotenv(tmp_path, monkeypatch, caplog):
    from judgeflow.config.settings import load_settings

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("JUDGEFLOW_ALERT_WEBHOOK_SECRET=whsec-not-for-others\n")
    os.chmod(tmp_path / ".env", 0o644)
    with caplog.at_level(logging.WARNING, logger="judgeflow"):
        load_settings()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "chmod 600" in r.getMessage()]
    assert warnings == [f"{tmp_path / '.env'} holds JUDGEFLOW_ALERT_WEBHOOK_SECRET and other local users can read it "
                        f"(mode 0644): chmod 600 {tmp_path / '.env'}"]
    assert "whsec-not-for-others" not in caplog.text
