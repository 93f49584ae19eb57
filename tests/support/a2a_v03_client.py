"""An ``a2a-sdk`` 0.3 client, run by an interpreter that has that version installed (the
0.3 compatibility test starts it): ``python a2a_v03_client.py URL KEY QUESTION``.

Prints one JSON line: the card's protocol version, the answer text and the task's state."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, TextPart


async def main(url: str, key: str, question: str) -> None:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        message = Message(
            role=Role.user, parts=[Part(root=TextPart(text=question))], message_id=uuid.uuid4().hex
        )
        texts: list[str] = []
        state = ""
        async for event in client.send_message(message):
            task = event[0] if isinstance(event, tuple) else None
            if task is None:
                continue
            state = str(task.status.state.value)
            for artifact in task.artifacts or []:
                texts += [p.root.text for p in artifact.parts if hasattr(p.root, "text")]
        print(
            json.dumps({"version": card.protocol_version, "answer": "".join(texts), "state": state})
        )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
