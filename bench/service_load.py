"""Load on ``shelfhand serve``: N concurrent sessions streaming chat turns over SSE.

Starts ``shelfhand serve`` on 127.0.0.1 (a fresh workspace, the scripted model, the hashing
embedder), then N client sessions each send messages one after another (``stream=true``,
every SSE event read up to ``final``) for a fixed time. Reports turns/s, latency p50/p95/p99
per turn (request sent → final event read) and the server's resident memory.

    python bench/service_load.py                          # 50 sessions, 10 s, both scenarios
    python bench/service_load.py --sessions 100 --seconds 20 --scenario rag

Scenarios: ``text`` — the model answers at once (the service's own overhead: HTTP, auth,
session store, memory, agent loop, SSE); ``rag`` — each turn calls ``retrieve`` over a small
uploaded corpus, then answers citing it (adds tool execution and hybrid search).

Bounded on purpose: loopback only, at most 200 sessions and 20 s per scenario.
Goal (issue P2): >= 300 turns/s on 2 cores with SSE.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

MAX_SESSIONS = 200
MAX_SECONDS = 20.0
KEY = "bench-key"
SCRIPTS: dict[str, dict[str, Any]] = {
    "text": {"cycle": True, "turns": ["整机保修期为 12 个月，光源保修 6 个月 [1]。"]},
    "rag": {
        "cycle": True,
        "turns": [
            {"tool_call": "retrieve", "arguments": {"query": "保修期 warranty"}},
            "整机保修期为 12 个月，光源保修 6 个月 [1]。",
        ],
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kib(pid: int) -> tuple[int, int]:
    """Current and peak resident set size of ``pid`` in KiB (Linux /proc)."""
    values = {"VmRSS": 0, "VmHWM": 0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            key, _, rest = line.partition(":")
            if key in values:
                values[key] = int(rest.split()[0])
    except OSError:
        pass
    return values["VmRSS"], values["VmHWM"]


def start_server(
    workspace: Path,
    scenario: str,
    cpus: str | None = None,
    tracing: str = "stored",
    server_env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    script = workspace / "script.json"
    script.write_text(json.dumps(SCRIPTS[scenario], ensure_ascii=False), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(
        SHELFHAND_EMBEDDER="hashing",
        SHELFHAND_MODEL=f"scripted:{script}",
        SHELFHAND_API_KEYS=json.dumps({KEY: {"tenant": "bench", "user": "load"}}),
        SHELFHAND_TRACING=tracing,
    )
    env.update(server_env or {})
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "shelfhand.cli",
        "serve",
        "-w",
        str(workspace),
        "--port",
        str(port),
    ]
    cmd += ["--log-level", "warning", "--no-access-log"]
    if cpus:  # pin the server, e.g. to 2 cores, and run this client elsewhere
        cmd = ["taskset", "-c", cpus, *cmd]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # a benchmark may poll; tests wait on the log line
        if proc.poll() is not None:
            raise RuntimeError(
                "server exited:\n" + (proc.stderr.read() if proc.stderr else b"").decode()
            )
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start within 60 s")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 response (Content-Length or chunked body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
    if headers.get("transfer-encoding") == "chunked":
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status, bytes(body)
            body += await reader.readexactly(size + 2)
            del body[-2:]
    return status, await reader.readexactly(int(headers.get("content-length", "0")))


class RawClient:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams.

    httpx costs ~6 ms of client CPU per streamed turn, which on a 2-core machine would
    measure the client instead of the server; this costs a small fraction of that.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        body = json.dumps(payload, ensure_ascii=False).encode()
        self.writer.write(
            (
                f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
        return await _read_response(self.reader)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def one_session(
    host: str, port: int, stop_at: float, latencies: list[float], errors: list[str]
) -> None:
    client = RawClient(host, port)
    try:
        status, body = await client.post("/v1/sessions", {})
        if status != 201:
            errors.append(f"create {status}")
            return
        url = f"/v1/sessions/{json.loads(body)['id']}/messages"
        n = 0
        while time.perf_counter() < stop_at:
            n += 1
            started = time.perf_counter()
            status, body = await client.post(url, {"content": f"保修期多久？#{n}"})
            if status != 200:
                errors.append(str(status))
            elif b"event: final" not in body:
                errors.append("sse error" if b"event: error" in body else "no final event")
            else:
                latencies.append(time.perf_counter() - started)
    finally:
        client.close()


async def drive(url: str, sessions: int, seconds: float) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    await one_session(host, int(port), time.perf_counter() + 0.5, [], [])  # warm-up
    latencies: list[float] = []
    errors: list[str] = []
    started = time.perf_counter()
    stop_at = started + seconds
    await asyncio.gather(
        *(one_session(host, int(port), stop_at, latencies, errors) for _ in range(sessions))
    )
    elapsed = time.perf_counter() - started
    ms = sorted(x * 1000 for x in latencies)

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, int(p * len(ms)))], 2) if ms else float("nan")

    return {
        "turns": len(ms),
        "seconds": round(elapsed, 2),
        "turns_per_s": round(len(ms) / elapsed, 1),
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "mean_ms": round(statistics.fmean(ms), 2) if ms else float("nan"),
        "errors": len(errors),
        "error_kinds": sorted(set(errors))[:5],
    }


def upload_corpus(url: str) -> None:
    from shelfhand.knowledge.base import sample_corpus

    corpus = sample_corpus()
    files = [
        ("files", (p.name, p.read_bytes(), "application/octet-stream"))
        for p in sorted(corpus.iterdir())
        if p.is_file()
    ]
    r = httpx.post(
        url + "/v1/knowledge/files",
        files=files,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=120,
    )
    r.raise_for_status()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server of :func:`start_server` (killed if it has not ended within 15 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


def ms_per_turn(cpu_s: float, turns: int) -> float:
    """A server's CPU milliseconds per turn."""
    return round(cpu_s * 1000 / max(1, turns), 3)


def run_scenario(
    scenario: str,
    sessions: int,
    seconds: float,
    cpus: str | None = None,
    tracing: str = "stored",
    server_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="shelfhand-load-") as tmp:
        proc, url = start_server(Path(tmp), scenario, cpus, tracing, server_env)
        try:
            if scenario == "rag":
                upload_corpus(url)
            idle_rss, _ = rss_kib(proc.pid)
            cpu_before = cpu_seconds(proc.pid)
            result = asyncio.run(drive(url, sessions, seconds))
            server_cpu = cpu_seconds(proc.pid) - cpu_before
            rss, peak = rss_kib(proc.pid)
        finally:
            stop_server(proc)
    return {
        "scenario": scenario,
        "tracing": tracing,
        "sessions": sessions,
        **result,
        "server_cpu_ms_per_turn": ms_per_turn(server_cpu, result["turns"]),
        "server_rss_mib_idle": round(idle_rss / 1024, 1),
        "server_rss_mib_end": round(rss / 1024, 1),
        "server_rss_mib_peak": round(peak / 1024, 1),
    }


def alternate(
    scenario: str,
    sessions: int,
    seconds: float,
    rounds: int,
    cpus: str | None = None,
    server_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Tracing off and stored, both servers up at once, loaded in turns for ``seconds``
    each, ``rounds`` times (off first in even rounds, stored first in odd ones): the two
    blocks of a round ran seconds apart, so a round's ratio is not moved by the machine's
    speed drifting (on a shared virtual machine the same fixed loop takes ±30 % from one
    second to the next, which moved whole 15 s runs of one setting by 20 %)."""
    with (
        tempfile.TemporaryDirectory(prefix="shelfhand-load-") as tmp_off,
        tempfile.TemporaryDirectory(prefix="shelfhand-load-") as tmp_stored,
    ):
        servers: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
        blocks: dict[str, list[dict[str, Any]]] = {"off": [], "stored": []}
        try:
            for mode, tmp in (("off", tmp_off), ("stored", tmp_stored)):
                servers[mode] = start_server(Path(tmp), scenario, cpus, mode, server_env)
            for _, url in servers.values():
                if scenario == "rag":
                    upload_corpus(url)
                asyncio.run(drive(url, sessions, 2.0))  # warm-up, not counted
            for r in range(rounds):
                for mode in ("off", "stored") if r % 2 == 0 else ("stored", "off"):
                    proc, url = servers[mode]
                    cpu_before = cpu_seconds(proc.pid)
                    block = asyncio.run(drive(url, sessions, seconds))
                    block["server_cpu_ms_per_turn"] = ms_per_turn(
                        cpu_seconds(proc.pid) - cpu_before, block["turns"]
                    )
                    blocks[mode].append(block)
        finally:
            for proc, _ in servers.values():
                stop_server(proc)
    ratios = [
        s["turns_per_s"] / o["turns_per_s"]
        for o, s in zip(blocks["off"], blocks["stored"], strict=True)
        if o["turns_per_s"]
    ]
    cpu_ratios = [
        s["server_cpu_ms_per_turn"] / o["server_cpu_ms_per_turn"]
        for o, s in zip(blocks["off"], blocks["stored"], strict=True)
        if o["server_cpu_ms_per_turn"]
    ]

    def total(mode: str) -> float:
        return sum(b["turns"] for b in blocks[mode]) / sum(b["seconds"] for b in blocks[mode])

    return {
        "scenario": scenario,
        "sessions": sessions,
        "seconds_per_block": seconds,
        "rounds": rounds,
        "blocks": blocks,
        "turns_per_s": {m: round(total(m), 1) for m in blocks},
        "ratio_stored_to_off": {
            "median": round(statistics.median(ratios), 3),
            "mean": round(statistics.fmean(ratios), 3),
            "min": round(min(ratios), 3),
            "max": round(max(ratios), 3),
            "overall": round(total("stored") / total("off"), 3),
        },
        "server_cpu_ratio_median": round(statistics.median(cpu_ratios), 3),
        "errors": sum(b["errors"] for bs in blocks.values() for b in bs),
    }


def print_alternate(result: dict[str, Any]) -> None:
    out = [
        f"shelfhand serve load, {os.cpu_count()} CPUs, {result['scenario']}, "
        f"{result['sessions']} sessions, off and stored in turns: {result['rounds']} rounds of "
        f"{result['seconds_per_block']:g} s each",
        f"{'round':>5} {'off turns/s':>11} {'stored turns/s':>14} {'stored/off':>10} "
        f"{'CPU ms/turn off':>15} {'stored':>7}",
    ]
    off, stored = result["blocks"]["off"], result["blocks"]["stored"]
    for i, (o, s) in enumerate(zip(off, stored, strict=True), 1):
        ratio = s["turns_per_s"] / o["turns_per_s"] if o["turns_per_s"] else float("nan")
        out.append(
            f"{i:>5} {o['turns_per_s']:>11} {s['turns_per_s']:>14} {ratio:>10.3f} "
            f"{o['server_cpu_ms_per_turn']:>15} {s['server_cpu_ms_per_turn']:>7}"
        )
    r = result["ratio_stored_to_off"]
    out.append(
        f"stored / off turns/s: median {r['median']}, mean {r['mean']}, range {r['min']}-"
        f"{r['max']}, all blocks together {r['overall']} ({result['turns_per_s']['stored']} vs "
        f"{result['turns_per_s']['off']}); server CPU per turn, median ratio "
        f"{result['server_cpu_ratio_median']}; errors {result['errors']}"
    )
    sys.stdout.write("\n".join(out) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sessions", type=int, default=50, help=f"concurrent sessions (<= {MAX_SESSIONS})"
    )
    ap.add_argument(
        "--seconds", type=float, default=10.0, help=f"per scenario (<= {MAX_SECONDS:g})"
    )
    ap.add_argument("--scenario", choices=["text", "rag", "both"], default="both")
    ap.add_argument("--server-cpus", help="pin the server with taskset, e.g. 0,1")
    ap.add_argument("--out", type=Path, help="also write the results as JSON here")
    ap.add_argument(
        "--tracing",
        choices=["stored", "off", "both", "alternate"],
        default="stored",
        help="the servers' tracing setting; both: off and stored, taking turns, twice; "
        "alternate: both servers up at once, loaded in turns (see --rounds)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=10,
        help="with --tracing alternate: rounds of one off and one stored block of --seconds",
    )
    ap.add_argument(
        "--server-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the servers, e.g. answer_check=off (repeatable)",
    )
    args = ap.parse_args()
    server_env = {}
    for item in args.server_setting:
        name, _, value = item.partition("=")
        server_env[f"SHELFHAND_{name.strip().upper()}"] = value
    sessions = max(1, min(args.sessions, MAX_SESSIONS))
    seconds = max(1.0, min(args.seconds, MAX_SECONDS))
    scenarios = ["text", "rag"] if args.scenario == "both" else [args.scenario]
    if args.tracing == "alternate":
        found = []
        for s in scenarios:
            found.append(
                alternate(s, sessions, seconds, max(1, args.rounds), args.server_cpus, server_env)
            )
            print_alternate(found[-1])
        sys.stdout.write("RESULT " + json.dumps(found) + "\n")
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(found, indent=2), encoding="utf-8")
        return
    modes = ["off", "stored", "off", "stored"] if args.tracing == "both" else [args.tracing]
    results = [
        run_scenario(s, sessions, seconds, args.server_cpus, tracing=m, server_env=server_env)
        for s in scenarios
        for m in modes
    ]
    header = (
        f"{'scenario':8} {'tracing':>7} {'sessions':>8} {'turns/s':>8} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'p99 ms':>8} {'errors':>6} {'RSS MiB':>8} {'srv CPU ms/turn':>15}"
    )
    lines = [f"shelfhand serve load, {os.cpu_count()} CPUs, {seconds:g} s per scenario", header]
    for r in results:
        lines.append(
            f"{r['scenario']:8} {r['tracing']:>7} {r['sessions']:>8} {r['turns_per_s']:>8} {r['p50_ms']:>8} "
            f"{r['p95_ms']:>8} {r['p99_ms']:>8} {r['errors']:>6} {r['server_rss_mib_peak']:>8} "
            f"{r['server_cpu_ms_per_turn']:>15}"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.write("RESULT " + json.dumps(results) + "\n")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
