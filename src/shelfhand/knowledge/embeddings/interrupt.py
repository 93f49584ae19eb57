"""Stopping a local embedding nobody waits for any more, and none left running at exit.

A query embedding runs on a thread of its own with a deadline
(:func:`call_with_deadline`, used by the retriever for ``embed_timeout``); a thread cannot be
killed, so one past its deadline used to run on to its end, burning a core, and when the
process exited meanwhile (``mcp serve`` whose client went away after a timed-out
``retrieve``) the thread was still inside onnxruntime as the interpreter tore down and the
C++ runtime aborted the process ("terminate called without an active exception", exit 134).

Now the caller that stops waiting stops the call: :meth:`Interrupt.stop` sets
``RunOptions.terminate`` on the call's onnxruntime runs (a run stops before its next node and
raises; measured 0.07 s into a 5 s run) and every later step of the call refuses to start
(:func:`check`, between USE batches). And at the interpreter's exit, every onnxruntime run
still going is terminated and the threads inside a model's C++ or Rust code
(:func:`inside_model`) are waited for, at most :data:`EXIT_WAIT` seconds, so none is in there
when the runtime goes.

MiniLM (tokenizers and onnxruntime) wraps its embedding in :func:`inside_model` and each run
in :func:`onnx_run`; USE only calls :func:`check` between batches (its numpy forward pass
cannot be stopped, and a thread in numpy's C code at exit ends without harm: measured, no
abort, so the exit does not wait for it). An embedder elsewhere (an HTTP endpoint) is not
stopped: its thread keeps to its own timeout, as before.
"""

from __future__ import annotations

import atexit
import contextvars
import os
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from shelfhand.core.errors import KnowledgeError

__all__ = [
    "EXIT_WAIT",
    "EmbeddingStopped",
    "Interrupt",
    "call_with_deadline",
    "check",
    "inside_model",
    "onnx_run",
]

T = TypeVar("T")

EXIT_WAIT = 5.0
"""Seconds the interpreter's exit waits at most for threads still inside a local model."""


class EmbeddingStopped(KnowledgeError):
    """An embedding was stopped: its caller stopped waiting, or the process is exiting."""


class Interrupt:
    """The stop switch of the embeddings one thread makes (bound by :func:`call_with_deadline`)."""

    def __init__(self) -> None:
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """Terminate the call's onnxruntime runs now and refuse its later steps."""
        with _busy:
            self._stopped = True
            for options, owner in _runs.items():
                if owner is self:
                    options.terminate = True


_current: contextvars.ContextVar[Interrupt | None] = contextvars.ContextVar(
    "shelfhand_embedding_interrupt", default=None
)

# the process's threads inside a local model, and its onnxruntime runs going on with the
# Interrupt of the call each is for (under _busy)
_busy = threading.Condition()
_inside = 0
_runs: dict[Any, Interrupt | None] = {}
_exiting = False


def check() -> None:
    """Raise :class:`EmbeddingStopped` when this thread's embedding was stopped (its caller
    stopped waiting) or the process is exiting; a step of a local embedder calls it first."""
    if _exiting:
        raise EmbeddingStopped("embedding stopped: the process is exiting")
    interrupt = _current.get()
    if interrupt is not None and interrupt.stopped:
        raise EmbeddingStopped("embedding stopped: nobody waits for it any more")


@contextmanager
def inside_model() -> Iterator[None]:
    """Mark this thread as inside a model's native code (tokenizers, onnxruntime) until the
    block ends: the interpreter's exit waits for it (:data:`EXIT_WAIT` at most), as tearing
    the C++ runtime down under a running thread aborts the process."""
    global _inside
    check()
    with _busy:
        _inside += 1
    try:
        yield
    finally:
        with _busy:
            _inside -= 1
            _busy.notify_all()


@contextmanager
def onnx_run(ort: Any) -> Iterator[Any]:
    """A fresh ``RunOptions`` for one onnxruntime run, terminated when this thread's
    :class:`Interrupt` stops or the process exits (then the run raises)."""
    check()
    options = ort.RunOptions()
    options.log_severity_level = 4  # a terminated run is no error worth a line on stderr
    interrupt = _current.get()
    with _busy:
        if _exiting or (interrupt is not None and interrupt.stopped):
            options.terminate = True
        _runs[options] = interrupt
    try:
        yield options
    finally:
        with _busy:
            del _runs[options]


def call_with_deadline(fn: Callable[[], T], timeout: float, *, name: str) -> T:
    """``fn()`` on a daemon thread, waited for at most ``timeout`` seconds.

    Past the deadline the call is stopped (:meth:`Interrupt.stop`: a local model stops within
    a step; anything else runs on to its own end, as a hung endpoint keeps its thread until
    its timeout) and :class:`TimeoutError` raised. What ``fn`` raised is raised here.

    The thread is an idle one of an earlier call when there is one (a new thread costs a
    start-up handshake: about 110 µs more a query, measured), else a new one named ``name``;
    a call past its deadline keeps its thread until it ends, and the next call takes another.
    """
    interrupt = Interrupt()
    box: list[T] = []
    error: list[BaseException] = []
    done = threading.Event()

    worker = _Worker.take(name)

    def run() -> None:
        token = _current.set(interrupt)
        try:
            box.append(fn())
        except BaseException as exc:  # handed to the waiting caller
            error.append(exc)
        finally:
            _current.reset(token)
            worker.release()  # (idle before the caller wakes: its next call finds it)
            done.set()

    worker.hand(run)
    if not done.wait(timeout):
        interrupt.stop()
        raise TimeoutError(f"took longer than {timeout:g}s")
    if error:
        raise error[0]
    return box[0]


class _Worker:
    """A daemon thread running the calls handed to it, one at a time; idle between them, kept
    for the next call (:data:`MAX_IDLE` at most; beyond, it ends)."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._kept = False
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    @staticmethod
    def take(name: str) -> _Worker:
        """An idle worker, or a new one named ``name``."""
        with _idle_lock:
            if _idle:
                return _idle.pop()
        return _Worker(name)

    def hand(self, call: Callable[[], None]) -> None:
        """Run ``call`` next; it ends with :meth:`release`."""
        self._calls.put(call)

    def release(self) -> None:
        """Its call is done: idle (kept for the next one), or ending (enough are idle)."""
        with _idle_lock:
            self._kept = len(_idle) < MAX_IDLE and not _exiting
            if self._kept:
                _idle.append(self)

    def _serve(self) -> None:
        while True:
            self._calls.get()()  # (the call catches what it raises, then releases)
            if not self._kept:
                return


MAX_IDLE = 4
"""Idle threads kept for the next :func:`call_with_deadline` (concurrent searches)."""

_idle: list[_Worker] = []
_idle_lock = threading.Lock()


def stop_all(wait: float = EXIT_WAIT) -> bool:
    """Terminate every onnxruntime run going on, refuse new local-model steps, and wait at
    most ``wait`` seconds for the threads :func:`inside_model` to leave; whether they all
    did. Called at the interpreter's exit (registered below)."""
    global _exiting
    with _busy:
        _exiting = True
        for options in _runs:
            options.terminate = True
        return _busy.wait_for(lambda: _inside == 0, timeout=wait)


def _forked() -> None:
    """A forked child has none of its parent's threads: none inside a model, no runs, no
    idle workers."""
    global _busy, _inside, _runs, _idle, _idle_lock
    _busy = threading.Condition()
    _inside = 0
    _runs = {}
    _idle = []
    _idle_lock = threading.Lock()


atexit.register(stop_all)
os.register_at_fork(after_in_child=_forked)
