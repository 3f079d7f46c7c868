"""What sending text as written saves: the data block's token count, measured
with litellm's bundled tokenizers (no network), escaped vs as written.

This is the measurement the README quotes ("Metrics"); the assertions keep it
honest: non-English text must cost far fewer tokens than its escape codes,
and English text must cost the same.
"""

from __future__ import annotations

import json
import os

import pytest
from judgeflow.metrics.data_block import _DOUBLE_ANGLE, BEGIN, END, render_data_block

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

# (input, output) in five scripts: the same rude review of a report.
NON_ENGLISH = {
    "ru": ("Как тебе мой отчёт?", "Честно говоря, отчёт написан небрежно. Ты идиот, если думаешь, что это можно сдавать. Данные за третий квартал неполные."),
    "zh": ("你觉得我的报告怎么样？", "说实话，这份报告写得很马虎。你真是个白痴，竟然觉得这可以交上去。第三季度的数据不完整。"),
    "ja": ("私のレポートはどうですか？", "正直に言うと、このレポートは雑です。これを提出できると思うなんて、あなたは馬鹿ですね。第3四半期のデータが不完全です。"),
    "ar": ("ما رأيك في تقريري؟", "بصراحة، التقرير مكتوب بإهمال. أنت غبي إذا كنت تعتقد أنه يمكن تسليمه. بيانات الربع الثالث غير مكتملة."),
    "he": ("מה דעתך על הדוח שלי?", "בכנות, הדוח כתוב ברשלנות. אתה טיפש אם אתה חושב שאפשר להגיש אותו. הנתונים לרבעון השלישי חסרים."),
    "emoji": ("How was the demo?", "Honestly 🙄🤡 the demo was a mess 💩👎 but the slides were nice 👍🏽✨"),
}
ENGLISH = ("How is my report?", "Honestly, the report is sloppy. You're an idiot if you think this can be submitted.")


def escaped_block(data: dict) -> str:
    """The block as it was rendered before (ensure_ascii=True)."""
    line = _DOUBLE_ANGLE.sub(r"\\u003c", json.dumps(data, ensure_ascii=True))
    return f"{BEGIN}\n{line}\n{END}"


def tokens(model: str, text: str) -> int:
    return int(litellm.token_counter(model=model, text=text))


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-3.5-turbo"])
def test_text_as_written_costs_fewer_tokens(model: str) -> None:
    escaped = written = 0
    for language, (input, output) in NON_ENGLISH.items():
        data = {"input": input, "output": output}
        before, after = tokens(model, escaped_block(data)), tokens(model, render_data_block(data))
        assert after < before, language
        escaped, written = escaped + before, written + after
    # Measured: gpt-4o 1696 -> 422 tokens (4.0x), gpt-3.5-turbo 1695 -> 604 (2.8x).
    assert written * 2 < escaped

    english = {"input": ENGLISH[0], "output": ENGLISH[1]}
    assert tokens(model, render_data_block(english)) == tokens(model, escaped_block(english))
