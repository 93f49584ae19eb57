"""A parser worker: PDF, DOCX and HTML are parsed in a subprocess under time and memory limits.

Those formats run third-party parsers over compressed or deeply structured input, where a
hostile or broken file can take minutes or gigabytes. A worker is a long-lived child process
(spawning one per file is too slow), started on first use, with its address space capped
(``RLIMIT_AS`` = ``parse_memory_mb``). The parent waits at most ``parse_seconds`` for an
answer; past that it kills the worker (the next file starts a fresh one) and the file is
skipped with :class:`~shelfhand.core.errors.DocumentTooLarge`. A worker that runs out of memory
answers so and exits; one that dies without answering gets the file once more in a fresh
worker, then the file is reported unreadable. A process shares a small pool of workers
(:data:`POOL_SIZE`), one file per worker at a time, so one slow file does not stall every
other reader (the service parses several tenants' uploads at once).

Frames on the pipes are an 8-byte big-endian length and a pickle. Only this module's own
child is ever unpickled from, and the child only unpickles what its parent sent.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from shelfhand.core.errors import DocumentTooLarge, UnreadableDocumentError
from shelfhand.knowledge.reading.limits import ReadLimits

logger = logging.getLogger(__name__)

__all__ = ["ParseWorker", "WorkerPool", "WorkerUnavailable", "shared_worker"]

_HEADER = struct.Struct(">Q")


_MODULE = "shelfhand.knowledge.reading.parse_worker"


class WorkerUnavailable(Exception):
    """The worker process cannot be started here (the caller may parse in-process)."""


class ParseWorker:
    """Runs ``shelfhand.knowledge.reading.formats.parse_in_process`` in a child process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._memory_mb: int | None = None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return None if proc is None or proc.poll() is not None else proc.pid

    def parse(self, request: Any, limits: ReadLimits, name: str) -> Any:
        """Send ``request`` (what ``parse_in_process`` takes) and return its answer.

        Raises:
            DocumentTooLarge: The parse took longer than ``parse_seconds`` or needed more
                than ``parse_memory_mb``.
            UnreadableDocumentError: The file is unreadable, or the worker died on it.
            WorkerUnavailable: No worker process can be started.
        """
        payload = pickle.dumps((request, limits), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            # A worker that dies without answering gets a second try in a fresh one: it may
            # have been dying already (killed while idle); a file that crashes it twice is
            # the file's fault.
            for attempt in (1, 2):
                proc = self._send(payload, limits.parse_memory_mb)
                assert proc.stdout is not None
                try:
                    deadline = time.monotonic() + limits.parse_seconds
                    (size,) = _HEADER.unpack(_read_exact(proc.stdout, _HEADER.size, deadline))
                    answer = pickle.loads(_read_exact(proc.stdout, size, deadline))
                    break
                except TimeoutError:
                    self._kill()
                    raise limits.too_large(
                        name,
                        f"parsing took longer than {limits.parse_seconds:g} s",
                        "parse_seconds",
                    ) from None
                except (OSError, EOFError, pickle.UnpicklingError, struct.error) as exc:
                    code = self._kill()
                    if attempt == 2:
                        raise UnreadableDocumentError(
                            f"cannot read {name}: the parser worker died on it "
                            f"(exit code {code}; {exc})"
                        ) from None
        kind, value = answer
        if kind == "ok":
            return value
        if kind == "memory":
            self._kill()  # after a MemoryError the child is not worth keeping
            raise limits.too_large(
                name,
                f"parsing needed more than {limits.parse_memory_mb} MiB of memory",
                "parse_memory_mb",
            )
        if kind == "too_large":
            raise DocumentTooLarge(str(value))
        raise UnreadableDocumentError(str(value))

    def _send(self, payload: bytes, memory_mb: int) -> subprocess.Popen[bytes]:
        """Write the request; a worker that died while idle is replaced once, not blamed."""
        for attempt in (1, 2):
            proc = self._ensure(memory_mb)
            assert proc.stdin is not None
            try:
                proc.stdin.write(_HEADER.pack(len(payload)) + payload)
                proc.stdin.flush()
                return proc
            except OSError:
                self._kill()
                if attempt == 2:
                    raise WorkerUnavailable(
                        "the parser worker exits as soon as it starts"
                    ) from None
        raise AssertionError("unreachable")

    def _ensure(self, memory_mb: int) -> subprocess.Popen[bytes]:
        if self._proc is not None and (
            self._proc.poll() is not None or self._memory_mb != memory_mb
        ):
            self._kill()
        if self._proc is None:
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", _MODULE, str(memory_mb)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    close_fds=True,  # never inherit the workspace lock or sockets
                )
            except OSError as exc:
                raise WorkerUnavailable(f"cannot start the parser worker: {exc}") from exc
            self._memory_mb = memory_mb
            logger.debug("parser worker started (pid %d)", self._proc.pid)
        return self._proc

    def _kill(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                # (a request the dead worker never read is still buffered: closing flushes it)
                with contextlib.suppress(OSError):
                    stream.close()
        return proc.wait()

    def close(self) -> None:
        """Stop the worker (it is started again on the next parse)."""
        with self._lock:
            self._kill()


def _read_exact(stream: IO[bytes], size: int, deadline: float) -> bytes:
    fd = stream.fileno()
    out = bytearray()
    while len(out) < size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            raise TimeoutError
        piece = os.read(fd, min(size - len(out), 1 << 20))
        if not piece:
            raise EOFError("the worker closed its output")
        out += piece
    return bytes(out)


class WorkerPool:
    """Up to ``size`` workers, so one slow file does not hold up every other reader.

    A parse borrows an idle worker (the most recently used first, so a second process starts
    only when two files are parsed at the same time) or waits for one.
    """

    def __init__(self, size: int) -> None:
        self._workers = [ParseWorker() for _ in range(max(1, size))]
        self._idle: queue.LifoQueue[ParseWorker] = queue.LifoQueue()
        for worker in reversed(self._workers):
            self._idle.put(worker)

    @property
    def pids(self) -> list[int]:
        """Process ids of the running workers."""
        return [pid for w in self._workers if (pid := w.pid) is not None]

    @contextmanager
    def borrow(self) -> Iterator[ParseWorker]:
        """An idle worker, for the block's duration (waits for one if all are busy)."""
        worker = self._idle.get()
        try:
            yield worker
        finally:
            self._idle.put(worker)

    def parse(self, request: Any, limits: ReadLimits, name: str) -> Any:
        """:meth:`ParseWorker.parse` on an idle worker."""
        with self.borrow() as worker:
            return worker.parse(request, limits, name)

    def close(self) -> None:
        """Stop every worker (each starts again when next needed)."""
        for worker in self._workers:
            worker.close()


POOL_SIZE = 2  # enough that one slow file never stalls the rest; each may use parse_memory_mb
_shared: WorkerPool | None = None
_shared_lock = threading.Lock()


def shared_worker() -> WorkerPool:
    """The process-wide workers (``POOL_SIZE`` at most; stopped at interpreter exit)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WorkerPool(POOL_SIZE)
            atexit.register(_shared.close)
        return _shared


# --- the child --------------------------------------------------------------------------------


def _serve(memory_mb: int) -> None:
    try:
        import resource

        cap = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ImportError, ValueError, OSError) as exc:  # not on this platform: time limit only
        logger.warning("parser worker: no memory limit (%s)", exc)
    # a parser's complaints about an odd file ("EOF marker not found") are not the user's
    # business: what matters reaches them as the file's skip reason; with no logging set up
    # here they would go to the terminal through logging's last-resort handler
    import warnings

    from shelfhand.knowledge.reading.formats import parse_in_process

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"pypdf(\..*)?")
    source = os.fdopen(os.dup(0), "rb")
    sink = os.fdopen(os.dup(1), "wb")
    # Only frames go to the parent; stray prints of a parser go to stderr.
    os.dup2(2, 1)
    while True:
        header = source.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # the parent went away
        (size,) = _HEADER.unpack(header)
        request, limits = pickle.loads(source.read(size))
        fatal = False
        try:
            answer: tuple[str, Any] = ("ok", parse_in_process(request, limits))
        except MemoryError:
            answer, fatal = ("memory", ""), True
        except DocumentTooLarge as exc:
            answer = ("too_large", str(exc))
        except UnreadableDocumentError as exc:
            answer = ("unreadable", str(exc))
        except RecursionError:
            answer = ("unreadable", f"cannot read {request.path}: the file nests too deeply")
        except Exception as exc:  # a parser bug on odd input: that file is unreadable
            answer = ("unreadable", f"cannot read {request.path}: {type(exc).__name__}: {exc}")
        payload = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        sink.write(_HEADER.pack(len(payload)) + payload)
        sink.flush()
        if fatal:
            return


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
