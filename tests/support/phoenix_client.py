"""An instrumented LLM app sending OpenInference traces to a Phoenix server over OTLP/HTTP.

Runs in Phoenix's own venv (tests/support/phoenix.py), never imported by the test process:

    .venv-phoenix/bin/python tests/support/phoenix_client.py --collector URL --api-base URL

Each trace (project per scenario, set as the ``openinference.project.name`` resource
attribute) is a CHAIN span holding, in order, the RETRIEVER spans (made with the OTel
API, carrying ``retrieval.documents``) and one real ``openai`` chat call instrumented by
``openinference-instrumentation-openai`` (an LLM span) against the app model at
``--api-base``. Prints ``{scenario: {"trace_id"}}`` as JSON once every span
is exported."""

from __future__ import annotations

import argparse
import json
import sys

TRACES = [
    {"name": "grounded", "project": "rag-app",
     "documents": ["Paris is the capital and largest city of France.", "France is in Western Europe."],
     "messages": [{"role": "system", "content": "Answer from the documents."},
                  {"role": "user", "content": "What is the capital of France? reply: Paris is the capital of France."}]},
    {"name": "ungrounded", "project": "rag-app",
     "documents": ["The Eiffel Tower is 330 metres tall."],
     "messages": [{"role": "user", "content": "How tall is the tower? reply: It is 500 metres tall [halluc=0.75]."}]},
    {"name": "two_retrievals", "project": "rag-app",
     "documents": ["Berlin is the capital of Germany."], "more_documents": ["Germany borders France."],
     "messages": [{"role": "user", "content": "Capital of Germany? reply: Berlin is the capital of Germany."}]},
    {"name": "toxic", "project": "chat-app", "documents": [],
     "messages": [{"role": "user", "content": "My order is late. reply: You are an idiot [toxic]. It ships today."}]},
    {"name": "failure", "project": "chat-app", "documents": [],
     "messages": [{"role": "user", "content": "Summarise this. reply: [fail]"}]},
    {"name": "tool_call", "project": "chat-app", "documents": [],
     "messages": [{"role": "user", "content": "Weather in Paris? reply: [tool]"}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
         "type": "object", "properties": {"city": {"type": "string"}}}}}]},
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--collector", required=True, help="Phoenix's OTLP/HTTP traces endpoint")
    parser.add_argument("--api-base", required=True, help="the OpenAI-compatible app model")
    parser.add_argument("--only", action="append", help="scenario names (default: all)")
    args = parser.parse_args(argv)

    import openai
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry import trace as trace_api
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    providers = {}
    instrumentor = OpenAIInstrumentor()
    ids = {}
    client = openai.OpenAI(base_url=args.api_base, api_key="sk-app", max_retries=0)
    for scenario in TRACES:
        if args.only and scenario["name"] not in args.only:
            continue
        project = scenario["project"]
        if project not in providers:
            provider = TracerProvider(resource=Resource({"openinference.project.name": project}))
            provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=args.collector)))
            providers[project] = provider
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        instrumentor.instrument(tracer_provider=providers[project])
        tracer = providers[project].get_tracer("judgeflow-tests")
        with tracer.start_as_current_span(
            scenario["name"], attributes={"openinference.span.kind": "CHAIN"}
        ) as root:
            for docs in (scenario["documents"], scenario.get("more_documents")):
                if not docs:
                    continue
                with tracer.start_as_current_span("retrieve", attributes={
                    "openinference.span.kind": "RETRIEVER",
                    "input.value": scenario["messages"][-1]["content"],
                    **{f"retrieval.documents.{i}.document.content": d for i, d in enumerate(docs)},
                    **{f"retrieval.documents.{i}.document.id": f"doc-{i}" for i in range(len(docs))},
                }):
                    pass
            try:
                kwargs = {"tools": scenario["tools"]} if "tools" in scenario else {}
                client.chat.completions.create(model="app-model", messages=scenario["messages"], **kwargs)
            except openai.APIError:
                if scenario["name"] != "failure":
                    raise
            ids[scenario["name"]] = {"trace_id": format(root.get_span_context().trace_id, "032x")}
    for provider in providers.values():
        provider.force_flush()
        provider.shutdown()
    print(json.dumps(ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
