"""A local embedding nobody waits for any more stops, and none is left inside onnxruntime when
the process exits (:mod:`shelfhand.knowledge.embeddings.interrupt`), with the real packaged
models.

Before: the thread of a query embedding past its deadline ran its whole embedding, and a
process exiting meanwhile aborted in onnxruntime's teardown ("terminate called without an
active exception", exit 134; 5 runs of 5 for the exit test below).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from shelfhand.knowledge.embeddings.interrupt import call_with_deadline
from shelfhand.knowledge.embeddings.local import MiniLMEmbedder, USEEmbedder

LONG_EN = "The warranty covers the heater for one year from the date of purchase. " * 40
"""About 600 tokens: three MiniLM windows."""
LONG_ZH = "产品自购买之日起保修一年，加热器故障请联系售后服务。" * 40


def _alive(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def _ends_within(name: str, seconds: float) -> float:
    """Seconds until no thread named ``name`` is left (fails past ``seconds``)."""
    started = time.monotonic()
    for thread in _alive(name):
        thread.join(max(0.0, seconds - (time.monotonic() - started)))
    assert not _alive(name), f"{name} still running after {seconds}s"
    return time.monotonic() - started


def test_an_abandoned_minilm_embedding_stops_at_its_deadline() -> None:
    minilm = MiniLMEmbedder(threads=1)
    minilm.embed(["warm up"])
    texts = [LONG_EN] * 400  # 1,200 windows: a minute or more of one core
    with pytest.raises(TimeoutError):
        call_with_deadline(lambda: minilm.embed(texts), 0.5, name="test-abandoned-minilm")
    # its onnxruntime run is terminated: the thread ends now, not after its embedding
    _ends_within("test-abandoned-minilm", 15)
    assert minilm.embed(["still works"]).shape == (1, 384)  # the embedder is not spoilt


def test_an_abandoned_use_embedding_stops_before_its_next_batch() -> None:
    use = USEEmbedder(batch_size=1, threads=1)
    use.embed(["warm up"])
    texts = [LONG_ZH] * 1000  # a thousand batches
    with pytest.raises(TimeoutError):
        call_with_deadline(lambda: use.embed(texts), 0.5, name="test-abandoned-use")
    _ends_within("test-abandoned-use", 15)
    assert use.embed(["仍然可用"]).shape == (1, 512)


def test_an_embedding_within_its_deadline_returns_its_vectors() -> None:
    minilm = MiniLMEmbedder(threads=1)
    vectors = call_with_deadline(lambda: minilm.embed(["hello"]), 60, name="test-in-time")
    assert vectors.shape == (1, 384)


EXIT_DURING_EMBEDDING = textwrap.dedent(
    f"""
    import threading, time
    from shelfhand.knowledge.embeddings.local import MiniLMEmbedder
    minilm = MiniLMEmbedder(threads=1)
    minilm.embed(["warm up"])
    texts = [{LONG_EN!r}] * 400
    threading.Thread(target=minilm.embed, args=(texts,), daemon=True).start()
    time.sleep(0.5)  # well inside its minute of onnxruntime runs
    print("exiting", flush=True)
    """
)


def test_a_process_exiting_during_a_minilm_embedding_exits_0_promptly() -> None:
    """A daemon thread inside onnxruntime at exit (the service stopped mid-embedding)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", EXIT_DURING_EMBEDDING],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    took = time.monotonic() - started
    assert "exiting" in done.stdout, done.stderr
    assert "terminate called" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert took < 30, took  # the run was terminated, not waited for to its end
