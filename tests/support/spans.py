"""Span processors for tests: keep finished spans in a list."""

from __future__ import annotations

from shelfhand.core.tracing import Span


class ListProcessor:
    """Finished spans, in the order they ended."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def on_end(self, span: Span) -> None:
        self.spans.append(span)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]

    def children(self, parent: Span) -> list[Span]:
        return sorted(
            (s for s in self.spans if s.parent_id == parent.span_id), key=lambda s: s.start_ns
        )
