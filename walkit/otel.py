"""OpenTelemetry trace context in record headers (the ``otel`` extra: opentelemetry-api).

A log opened with ``trace_context=True`` puts the current trace context in the headers of
each record it appends, through OpenTelemetry's global propagator (W3C ``traceparent`` and
``tracestate`` unless the application configured another), as OpenTelemetry's Kafka
instrumentation does. A consumer continues the trace from the record::

    from opentelemetry import trace

    async for record in log.reader():
        with tracer.start_as_current_span("apply", context=walkit.otel.extract(record)):
            apply(record)

so one trace runs from the request that appended the record to the consumer that applied it.
Without a current span nothing is added, and headers the append was given win over those of
the context (a record that carries its own ``traceparent`` keeps it). Off by default: a log
opened without the option, or without opentelemetry-api installed, never imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from walkit._core.record import Headers
from walkit.errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["check_available", "current_headers", "extract", "merge"]


class _HasHeaders(Protocol):
    @property
    def headers(self) -> Headers | None: ...


def check_available() -> None:
    """ConfigurationError unless opentelemetry-api can be imported."""
    try:
        import opentelemetry.propagate  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "trace_context=True needs the opentelemetry-api package (pip install 'walkit[otel]')"
        ) from None


def current_headers() -> Headers | None:
    """The current context as headers, by the global propagator (None: nothing to carry)."""
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple((name, value.encode()) for name, value in carrier.items()) or None


def merge(headers: Headers | None, context: Headers | None) -> Headers | None:
    """``headers`` followed by those of ``context`` whose names they do not already have."""
    if context is None:
        return headers
    if headers is None:
        return context
    names = {name for name, _value in headers}
    return headers + tuple(pair for pair in context if pair[0] not in names)


def extract(record: _HasHeaders) -> Context:
    """The OpenTelemetry context a record's headers carry (the current one when none): pass
    it as ``context=`` to ``start_as_current_span``, or attach it."""
    from opentelemetry import propagate

    carrier = {name: value.decode("utf-8", "replace") for name, value in record.headers or ()}
    return propagate.extract(carrier)
