"""``shelfhand trace ID``'s tree, line by line: a failed model call says why, a retrieved
passage shows its title once (not its document twice), a turn says how its answer was made."""

from __future__ import annotations

from shelfhand.cli.trace import tree_lines
from shelfhand.traces.store import SpanRecord

MS = 1_000_000


def span(span_id: str, parent: str, name: str, start: int, end: int, **attributes: object):
    return SpanRecord(
        span_id=span_id, parent_id=parent, name=name, kind="x", start_ns=start * MS,
        end_ns=end * MS, status="error" if "error.type" in attributes else "ok",
        attributes=dict(attributes),
    )  # fmt: skip


def test_the_tree_says_why_a_call_failed_which_passages_came_back_and_how_the_turn_ended() -> None:
    spans = [
        span("a", "", "turn", 0, 900, **{
            "gen_ai.usage.input_tokens": 0, "gen_ai.usage.output_tokens": 0,
            "shelfhand.turn.stop_reason": "model_timeout",
            "shelfhand.answer.fallback_reason": "model_timeout",
            "shelfhand.answer.extractive": True,
            "shelfhand.answer.passages": ["docs/policy.md::0"],
        }),
        span("b", "a", "retrieval", 1, 5, **{
            "gen_ai.retrieval.query.text": "电池保修多久？", "shelfhand.retrieval.mode": "hybrid",
            "gen_ai.retrieval.documents": [
                {"id": "docs/policy.md::0", "source": "docs/policy.md", "title": "售后政策",
                 "score": 0.61},
                {"id": "faq-md::3", "source": "faq.md", "title": "", "score": 0.2},
            ],
        }),
        span("c", "a", "chat local", 6, 606, **{
            "error.type": "ModelTimeoutError",
            "shelfhand.chat.failure": "model 'local' sent no first token within 30s",
            "gen_ai.usage.input_tokens": 812, "gen_ai.usage.output_tokens": 0,
            "shelfhand.usage.estimated": True,  # cut off: what its budget charged
        }),
    ]  # fmt: skip
    turn, rests, retrieval, first, second, chat = tree_lines(spans)
    assert "tokens 812/0 (estimated)" in chat
    assert rests.strip() == "· the answer rests on docs/policy.md::0"
    assert turn.endswith("tokens 0/0, stop model_timeout, extractive")
    assert first.endswith("- 0.610 docs/policy.md::0  售后政策")
    assert second.endswith("- 0.200 faq.md faq-md::3")
    assert "retrieval" in retrieval and "'电池保修多久？'" in retrieval
    assert "✗ ModelTimeoutError: model 'local' sent no first token within 30s" in chat


def test_a_kept_answer_with_unsupported_sentences_says_how_many() -> None:
    (line,) = tree_lines(
        [span("a", "", "turn", 0, 9, **{
            "shelfhand.turn.stop_reason": "final", "shelfhand.answer.grounded": False,
            "shelfhand.answer.unsupported_sentences": 2,
        })]
    )  # fmt: skip
    assert line.endswith("(9.0 ms)  2 unsupported sentences")


def test_a_kept_answer_the_check_could_not_ground_says_so() -> None:
    (line,) = tree_lines(
        [span("a", "", "turn", 0, 9, **{
            "shelfhand.answer.grounded": False, "shelfhand.answer.unsupported_sentences": 0,
        })]
    )  # fmt: skip
    assert line.endswith("(9.0 ms)  not grounded")


def test_the_list_keeps_its_columns_for_a_chinese_user_id(tmp_path) -> None:
    from rich.cells import cell_len

    from shelfhand.core.tracing import Tracer
    from shelfhand.traces import SqliteTraceStore, StoreRecorder
    from support.cli import run_cli

    store = SqliteTraceStore(tmp_path / "traces.db")
    recorder = StoreRecorder(store, interval=60)
    tracer = Tracer([recorder])
    for n, user in enumerate(("alice", "张三")):
        tracer.start_root("turn", trace_id=f"{n:032x}", tenant_id="acme", user_id=user).end()
    recorder.close()
    out = run_cli(["trace", "--tenant", "acme"], workspace=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2
    # the duration column starts at the same cell on both lines
    starts = {cell_len(line[: line.index(" ms ")]) for line in lines}
    assert len(starts) == 1


def test_a_search_whose_ranking_timed_out_says_its_order_is_the_fused_one() -> None:
    reason = "rerank (llm:local) failed, fused order kept: the model did not rank within 25 s"
    search, ranking = tree_lines(
        [
            span("a", "", "retrieval", 0, 25_001, **{
                "gen_ai.retrieval.query.text": "桂花董糖", "shelfhand.retrieval.mode": "hybrid",
                "shelfhand.retrieval.rerank_reason": reason,
            }),
            span("b", "a", "chat local", 1, 25_001, **{
                "error.type": "ModelTimeoutError",
                "shelfhand.chat.failure": "model 'local' did not answer within 25s",
            }),
        ]
    )  # fmt: skip
    assert search.endswith(f"mode hybrid, {reason}")
    assert ranking.endswith("✗ ModelTimeoutError: model 'local' did not answer within 25s")
