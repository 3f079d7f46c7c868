from judgeflow.sources.session_id import is_session_id, session_result_id


def test_a_sessions_id_is_its_sources_and_keys_and_never_the_key_itself():
    long_key = "k" * 10_000
    a = session_result_id("public.llm_traces", long_key)
    assert is_session_id(a) and len(a) == 42 and long_key[:50] not in a
    assert session_result_id("public.llm_traces", long_key) == a
    assert session_result_id("phoenix:spans", long_key) != a
    assert session_result_id("public.llm_traces", "k") != a
    assert not is_session_id("trace-1")
