"""OpenTelemetry: the spans and metrics of guarded calls, printed to the console.

Needs the OpenTelemetry SDK (``pip install opentelemetry-sdk``); the library itself only
uses ``opentelemetry-api``. Runs offline against a FakeProvider: a plain call, a retried
call, a stream and a cache hit.
"""

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.retry import waits_off
from llmguard_sdk.testing import FakeProvider, Fault

# The application configures the SDK once; every Guard then reports through it.
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
trace.set_tracer_provider(tracer_provider)
reader = PeriodicExportingMetricReader(ConsoleMetricExporter(), export_interval_millis=60_000)
meter_provider = MeterProvider(metric_readers=[reader])
metrics.set_meter_provider(meter_provider)

with FakeProvider(model="gpt-4o-mini") as api:
    provider = OpenAICompatibleProvider(api.base_url, model="gpt-4o-mini", name="openai")
    with Guard(provider, cache=True) as guard:  # telemetry=True is the default
        question = [{"role": "user", "content": "What is a circuit breaker?"}]
        guard.chat(question, feature="faq", tenant="acme")
        api.script(Fault(status=503))
        with waits_off():
            guard.chat([{"role": "user", "content": "Explain retries"}], feature="faq")
        api.script(Fault(first_token_delay=0.05, inter_token_delay=0.01))
        with guard.chat([{"role": "user", "content": "Stream this"}], stream=True) as stream:
            print("streamed:", "".join(chunk.text for chunk in stream))
        print("cache:", guard.chat(question, feature="faq", tenant="acme").metadata["cache"])

meter_provider.shutdown()  # exports the metrics now instead of in a minute
tracer_provider.shutdown()
