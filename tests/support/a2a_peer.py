"""A plain ``a2a-sdk`` server on 127.0.0.1 (no shelfhand inside): the peer our A2A client
talks to. It answers every message with a fixed text and a cited passage, and records what
it received (the bearer token, the message metadata)."""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers.proto_helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette

from shelfhand.mcp.server import listening_socket


@dataclass
class Peer:
    url: str
    answer: str
    tokens: list[str] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)
    server: Any = None
    thread: threading.Thread | None = None
    hang: threading.Event | None = None
    """When set, each answer waits for this event (a remote agent that hangs)."""

    def stop(self) -> None:
        if self.hang is not None:
            self.hang.set()
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=15)


class _Executor(AgentExecutor):
    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        self.peer.metadata.append(MessageToDict(context.message.metadata))
        task_id, context_id = context.task_id or "", context.context_id or ""
        if context.current_task is None:
            await event_queue.enqueue_event(
                new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED)
            )
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        if self.peer.hang is not None:
            await asyncio.to_thread(self.peer.hang.wait, 30)
        citation = {
            "index": 1,
            "source": "partner/catalogue.md",
            "title": "目录",
            "text": "X1 售价 999 元",
        }
        await updater.add_artifact(
            [new_text_part(self.peer.answer)],
            name="answer",
            metadata={"citations": [citation]},
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def start_peer(answer: str, *, hang: bool = False) -> Peer:
    """An A2A agent answering ``answer`` to everything, served in a uvicorn thread."""
    import uvicorn

    sock = listening_socket("127.0.0.1", 0)  # (TCP_NODELAY on its connections)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    peer = Peer(url=url, answer=answer, hang=threading.Event() if hang else None)
    card = AgentCard(
        name="partner",
        description="The partner's catalogue.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url + "/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="catalogue", name="catalogue", description="Prices.", tags=["x"])],
    )
    handler = DefaultRequestHandlerV2(
        agent_executor=_Executor(peer), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict(scope["headers"])
            peer.tokens.append(headers.get(b"authorization", b"").decode())
        await app(scope, receive, send)

    peer.server = uvicorn.Server(uvicorn.Config(recording, log_level="warning", lifespan="on"))
    peer.thread = threading.Thread(target=peer.server.run, kwargs={"sockets": [sock]}, daemon=True)
    peer.thread.start()
    return peer


def dead_url() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"
