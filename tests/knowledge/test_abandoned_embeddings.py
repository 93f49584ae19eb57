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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from shelfhand.knowledge.embeddings.interrupt import call_with_deadline
from shelfhand.knowledge.embeddings.local import MiniLMEmbedder, USEEmbedder

LONG_EN = "The warranty covers the heater for one year from the date of purchase. " * 40
"""About 600 tokens: three MiniLM windows."""
LONG_ZH = "产品自购买之日起保修一年，加热器故障请联系售后服务。" * 40


def _abandoned(embed: Callable[[], object]) -> float:
    """Seconds from the deadline's TimeoutError until the abandoned ``embed`` ended (15 s at
    most: its whole work is a minute or more of one core)."""
    ended = threading.Event()

    def call() -> object:
        try:
            return embed()
        finally:
            ended.set()

    with pytest.raises(TimeoutError):
        call_with_deadline(call, 0.5, name="test-abandoned")
    started = time.monotonic()
    assert ended.wait(15), "the abandoned embedding still runs after 15 s"
    return time.monotonic() - started


def test_an_abandoned_minilm_embedding_stops_at_its_deadline() -> None:
    minilm = MiniLMEmbedder(threads=1)
    minilm.embed(["warm up"])
    texts = [LONG_EN] * 400  # 1,200 windows: a minute or more of one core
    # its onnxruntime run is terminated: the call ends now, not after its embedding
    _abandoned(lambda: minilm.embed(texts))
    assert minilm.embed(["still works"]).shape == (1, 384)  # the embedder is not spoilt


def test_an_abandoned_use_embedding_stops_before_its_next_batch() -> None:
    use = USEEmbedder(batch_size=1, threads=1)
    use.embed(["warm up"])
    texts = [LONG_ZH] * 1000  # a thousand batches
    _abandoned(lambda: use.embed(texts))
    assert use.embed(["仍然可用"]).shape == (1, 512)


def test_the_thread_of_a_call_is_kept_for_the_next() -> None:
    """Sequential calls run on one thread (a new thread's start-up costs a query ~110 µs),
    and concurrent ones each on their own."""
    # (the threads themselves, kept alive, not their idents: a new thread may reuse one)
    seen = [call_with_deadline(threading.current_thread, 10, name="test-kept") for _ in range(20)]
    assert len({id(t) for t in seen}) == 1
    gate = threading.Barrier(3, timeout=10)

    def meet() -> threading.Thread:
        gate.wait()
        return threading.current_thread()

    with ThreadPoolExecutor(3) as pool:
        idents = list(pool.map(lambda _: call_with_deadline(meet, 10, name="test-kept"), range(3)))
    assert len({id(t) for t in idents}) == 3


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
