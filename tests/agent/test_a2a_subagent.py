"""A remote A2A agent as a subagent: our client against a plain ``a2a-sdk`` server, declared
in code and in ``agents/*.md``, delegated to through governance, and a dead endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

pytest.importorskip("a2a", reason="the a2a extra is not installed")

from shelfhand import Toolkit, UserContext
from shelfhand.agent.subagents import Subagent, load_subagent_file
from shelfhand.agent.supervisor import Supervisor
from shelfhand.app import App
from shelfhand.core.errors import DeclarationError
from shelfhand.core.settings import Settings
from shelfhand.providers.a2a_client import RemoteA2AAgent
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.audit import AuditLog
from shelfhand.tools.policy import GovernancePolicy
from support.a2a_peer import Peer, dead_url, start_peer

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice", roles=["user"])


@pytest.fixture
def peer() -> Iterator[Peer]:
    started = start_peer("X1 的价格是 999 元 [1]。")
    yield started
    started.stop()


def delegating_model(final: str) -> ScriptedModel:
    return ScriptedModel([tool_call("partner", {"task": "X1 多少钱？"}), text(final)])


async def test_the_supervisor_delegates_to_a_remote_agent_with_its_token_and_not_the_callers_identity(
    peer: Peer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PARTNER_A2A_KEY", "s3cret")
    remote = RemoteA2AAgent(peer.url, token_env="PARTNER_A2A_KEY")
    spec = Subagent("partner", "The partner's catalogue and prices.", agent=remote)
    with AuditLog(tmp_path / "audit.db") as audit:
        sup = Supervisor(
            model=delegating_model("999 元 [1]。"),
            toolkit=Toolkit([], audit=audit),
            subagents=[spec],
        )
        with anyio.fail_after(30):
            result = await sup.run("X1 多少钱？", context=ALICE, trace_id="turn-a2a")
        handed_back = result.messages[2].tool_results[0]
        assert handed_back.content.startswith("X1 的价格是 999 元 [1]。")
        assert not handed_back.is_error
        assert result.citations[0].source == "partner/catalogue.md"
        assert peer.tokens == ["Bearer s3cret"]
        assert peer.metadata == [{}]  # nothing about alice went out
        records = audit.query(trace_id="turn-a2a")
        assert [r.tool for r in records] == ["partner"]


async def test_the_callers_identity_is_forwarded_only_when_configured(peer: Peer) -> None:
    remote = RemoteA2AAgent(peer.url, forward_identity=True)
    sup = Supervisor(
        model=delegating_model("好"),
        toolkit=Toolkit([]),
        subagents=[Subagent("partner", "Prices.", agent=remote)],
    )
    with anyio.fail_after(30):
        await sup.run("X1 多少钱？", context=ALICE)
    assert peer.metadata == [{"shelfhand.caller": {"tenant_id": "acme", "user_id": "alice"}}]


async def test_a_dead_remote_agent_ends_with_an_honest_answer_not_a_hang() -> None:
    remote = RemoteA2AAgent(dead_url(), connect_timeout=2)
    sup = Supervisor(
        model=delegating_model("合作方的目录暂时连不上，我无法确认 X1 的价格。"),
        toolkit=Toolkit([]),
        subagents=[Subagent("partner", "Prices.", agent=remote, timeout=10)],
    )
    with anyio.fail_after(30):
        result = await sup.run("X1 多少钱？", context=ALICE)
    failed = result.messages[2].tool_results[0]
    assert failed.is_error and "cannot be reached" in failed.content
    assert result.output == "合作方的目录暂时连不上，我无法确认 X1 的价格。"


async def test_a_remote_agent_that_hangs_is_abandoned_at_the_subagents_timeout() -> None:
    peer = start_peer("太晚了", hang=True)
    try:
        sup = Supervisor(
            model=delegating_model("合作方没有及时答复，我现在无法确认 X1 的价格。"),
            toolkit=Toolkit([]),
            subagents=[Subagent("partner", "Prices.", agent=RemoteA2AAgent(peer.url), timeout=1)],
        )
        with anyio.fail_after(30):
            result = await sup.run("X1 多少钱？", context=ALICE)
    finally:
        peer.stop()
    failed = result.messages[2].tool_results[0]
    assert failed.is_error and "timed out" in failed.content
    assert result.output == "合作方没有及时答复，我现在无法确认 X1 的价格。"


async def test_repeated_failures_of_a_remote_agent_open_its_breaker(tmp_path: Path) -> None:
    policy = GovernancePolicy(breaker_min_calls=2, breaker_failure_rate=0.5)
    model = ScriptedModel([
        tool_call("partner", {"task": "X1 多少钱？"}),
        tool_call("partner", {"task": "X1 的价格"}),
        tool_call("partner", {"task": "X1 报价"}),
        text("合作方的服务不可用，稍后再试。"),
    ])  # fmt: skip
    with AuditLog(tmp_path / "audit.db") as audit:
        sup = Supervisor(
            model=model,
            toolkit=Toolkit([], policy=policy, audit=audit),
            subagents=[Subagent("partner", "Prices.", agent=RemoteA2AAgent(dead_url()))],
            max_calls=5,
        )
        with anyio.fail_after(30):
            result = await sup.run("X1 多少钱？", context=ALICE, trace_id="turn-breaker")
        outcomes = [r.outcome for r in audit.query(trace_id="turn-breaker")]
    assert outcomes[:2] == ["error", "error"] and outcomes[2] == "circuit_open"
    assert result.output == "合作方的服务不可用，稍后再试。"


async def test_a_missing_credential_fails_the_call_instead_of_sending_none(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_A2A_KEY", raising=False)
    sup = Supervisor(
        model=delegating_model("没有凭据。"),
        toolkit=Toolkit([]),
        subagents=[
            Subagent(
                "partner", "Prices.", agent=RemoteA2AAgent(peer.url, token_env="NO_SUCH_A2A_KEY")
            )
        ],
    )
    with anyio.fail_after(30):
        result = await sup.run("X1 多少钱？", context=ALICE)
    failed = result.messages[2].tool_results[0]
    assert failed.is_error and "set NO_SUCH_A2A_KEY" in failed.content
    assert peer.tokens == []


def test_an_agents_file_with_a2a_becomes_a_remote_subagent(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "partner.md").write_text(
        "---\ndescription: 合作方的产品目录和价格。\na2a: https://partner.example.com/a2a\n"
        "a2a_token_env: PARTNER_A2A_KEY\ntimeout: 30\n---\n",
        encoding="utf-8",
    )
    [spec] = App(settings=Settings.load(tmp_path, env={})).subagents()
    assert isinstance(spec.agent, RemoteA2AAgent)
    assert spec.agent.url == "https://partner.example.com/a2a"
    assert spec.agent.token_env == "PARTNER_A2A_KEY" and not spec.agent.forward_identity
    assert spec.timeout == 30
    assert "s3cret" not in repr(RemoteA2AAgent(spec.a2a, token="s3cret"))  # logs stay clean


def test_an_a2a_line_that_is_not_a_url_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "partner.md"
    path.write_text("---\ndescription: x\na2a: partner.example.com\n---\n", encoding="utf-8")
    with pytest.raises(DeclarationError, match=r"partner\.md:1.*a2a must be an http\(s\):// URL"):
        load_subagent_file(path)
