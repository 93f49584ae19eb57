"""Span processors for tests: the finished spans, with ways to find them."""

from __future__ import annotations

from shelfhand.core.tracing import Span, SpanList


class ListProcessor(SpanList):
    """Finished spans, in the order they ended, found by name or parent."""

    def named(self, name: str) -> list[Span]:
        return [s for s in self.spans if s.name == name]

    def children(self, parent: Span) -> list[Span]:
        return sorted(
            (s for s in self.spans if s.parent_id == parent.span_id), key=lambda s: s.start_ns
        )
