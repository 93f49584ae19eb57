"""What a streamed turn its caller leaves costs the caller's token budget: against a running
``shelfhand serve`` (with ``[budgets]``), stream one turn, read ``--events`` text events, close
the connection, and print the caller's budgets and the tokens the usage ledger holds for them,
before and after (``GET /v1/usage``).

    python bench/cut_stream.py --url http://127.0.0.1:8093 --key KEY --events 15 \
        --question "请详细介绍武穴酥糖的历史、制作方法和特点，越详细越好。"
"""

from __future__ import annotations

import argparse
import json
import time

import httpx


def standing(url: str, key: str) -> dict[str, int]:
    """Each of the caller's budgets: what is used now; and the tokens of the caller's turns
    in the usage ledger (``ledger tokens``)."""
    reply = httpx.get(f"{url}/v1/usage", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    body = reply.json()
    found = {f"{b['scope']} {b['budget']}": b["used"] for b in body.get("budgets", [])}
    found["ledger tokens"] = sum(r["input_tokens"] + r["output_tokens"] for r in body["usage"])
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", default="http://127.0.0.1:8093")
    ap.add_argument("--key", required=True)
    ap.add_argument("--events", type=int, default=15)
    ap.add_argument("--question", default="请详细介绍武穴酥糖的历史、制作方法和特点，越详细越好。")
    a = ap.parse_args()
    before = standing(a.url, a.key)
    read, text = 0, ""
    with httpx.Client(base_url=a.url, headers={"Authorization": f"Bearer {a.key}"}) as c:
        session = c.post("/v1/sessions", timeout=30).json()["id"]
        body = {"content": a.question, "stream": True}
        with c.stream("POST", f"/v1/sessions/{session}/messages", json=body, timeout=600) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    if event.get("type") == "text_delta":
                        read, text = read + 1, text + event["text"]
                        if read == a.events:
                            break  # the caller goes away
    time.sleep(1.5)  # (the service sees the connection closed when it next writes)
    after = standing(a.url, a.key)
    print(f"read {read} text events ({len(text)} characters), then left")
    for name, used in after.items():
        print(f"{name}: {before.get(name, 0)} -> {used} ({used - before.get(name, 0):+d})")


if __name__ == "__main__":
    main()
