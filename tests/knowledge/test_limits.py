"""Bounded reading: bombs, deep nesting, huge text and slow parses are skipped with a reason."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import zipfile
import zlib
from pathlib import Path

import docx
import pytest

from shelfhand.app import App
from shelfhand.core.errors import ConfigurationError, DocumentTooLarge
from shelfhand.core.settings import Settings
from shelfhand.knowledge.reading.limits import ReadLimits, json_depth_exceeds
from shelfhand.knowledge.reading.parse_worker import POOL_SIZE, shared_worker
from shelfhand.knowledge.reading.readers import decode_text, read_file
from shelfhand.knowledge.stack import open_embedded_store

MIB = 1024 * 1024


def pdf_bomb(path: Path, zeros_mib: int = 200) -> Path:
    """A one-page PDF whose content stream inflates to ``zeros_mib`` MiB of zeros."""
    packer = zlib.compressobj(1)
    block = b"\0" * MIB
    stream = b"".join(packer.compress(block) for _ in range(zeros_mib)) + packer.flush()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    path.write_bytes(bytes(out))
    return path


def docx_bomb(path: Path, zeros_mib: int = 150) -> Path:
    """A valid DOCX with one more part that inflates to ``zeros_mib`` MiB (a zip bomb)."""
    document = docx.Document()
    document.add_paragraph("A perfectly ordinary paragraph.")
    document.save(str(path))
    with (
        zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive,
        archive.open("word/media/bomb.bin", "w") as member,
    ):
        block = b"\0" * MIB
        for _ in range(zeros_mib):
            member.write(block)
    return path


def big_docx(path: Path, paragraphs: int) -> Path:
    """A valid DOCX whose body XML holds ``paragraphs`` paragraphs (written directly: fast)."""
    document = docx.Document()
    document.add_paragraph("placeholder")
    document.save(str(path))
    with zipfile.ZipFile(path) as original:
        parts = {name: original.read(name) for name in original.namelist()}
    xml = parts["word/document.xml"].decode("utf-8")
    head, _, tail = xml.partition("<w:p>")
    tail = tail.partition("</w:p>")[2]
    para = "<w:p><w:r><w:t>段落 paragraph " + "内容 words " * 40 + "</w:t></w:r></w:p>"
    parts["word/document.xml"] = (head + para * paragraphs + tail).encode("utf-8")
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once: compressing hundreds of MiB of zeros is the slow part of these tests."""
    folder = tmp_path_factory.mktemp("bombs")
    pdf_bomb(folder / "bomb.pdf")
    docx_bomb(folder / "bomb.docx")
    return folder


def deep_json(path: Path, depth: int = 100_000) -> Path:
    path.write_text("[" * depth + "]" * depth, encoding="utf-8")
    return path


def test_a_pdf_bomb_is_refused_naming_the_limit(bombs: Path) -> None:
    bomb = bombs / "bomb.pdf"
    assert bomb.stat().st_size < 1 * MIB  # small on disk: the compressed bytes pass any size cap
    with pytest.raises(DocumentTooLarge, match=r"bomb\.pdf.*max_decompressed_mb"):
        read_file(bomb)


def test_a_docx_zip_bomb_is_refused_before_extracting(bombs: Path) -> None:
    bomb = bombs / "bomb.docx"
    assert bomb.stat().st_size < 2 * MIB
    with pytest.raises(DocumentTooLarge, match=r"bomb\.docx.*decompress.*max_decompressed_mb"):
        read_file(bomb)


def test_a_docx_within_the_limit_still_reads(tmp_path: Path) -> None:
    path = docx_bomb(tmp_path / "padded.docx", zeros_mib=2)
    (doc,) = read_file(path, limits=ReadLimits(max_decompressed_mb=10))
    assert "perfectly ordinary" in doc.text


def test_deep_json_is_refused_without_blowing_the_stack(tmp_path: Path) -> None:
    with pytest.raises(DocumentTooLarge, match=r"deep\.json.*nests deeper.*max_depth"):
        read_file(deep_json(tmp_path / "deep.json"))
    lines = tmp_path / "deep.jsonl"
    lines.write_text('{"id": 1}\n' + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    with pytest.raises(DocumentTooLarge, match=r"line 2 nests deeper"):
        read_file(lines)


def test_json_depth_counts_brackets_outside_strings_only() -> None:
    assert not json_depth_exceeds('{"a": "[[[[[[[[[[", "b": [1, {"c": "]]\\"[["}]}', 3)
    assert json_depth_exceeds('{"a": [[{"b": 1}]]}', 3)
    assert not json_depth_exceeds('{"a": [[{"b": 1}]]}', 4)


def test_text_over_the_character_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "long.txt"
    path.write_text("退货 return policy. " * 1000, encoding="utf-8")
    with pytest.raises(DocumentTooLarge, match=r"long\.txt.*characters.*max_chars = 5000"):
        read_file(path, limits=ReadLimits(max_chars=5000))
    assert read_file(path, limits=ReadLimits(max_chars=50_000))


def test_files_over_the_byte_and_record_limits_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    big.write_text("# 标题\n" + "x" * 200_000, encoding="utf-8")
    with pytest.raises(DocumentTooLarge, match=r"big\.md.*bytes.*max_file_mb"):
        read_file(big, limits=ReadLimits(max_file_mb=0.1))
    rows = tmp_path / "rows.csv"
    rows.write_text("id,name\n" + "".join(f"{n},item {n}\n" for n in range(50)), encoding="utf-8")
    with pytest.raises(DocumentTooLarge, match=r"50 records.*max_records"):
        read_file(rows, limits=ReadLimits(max_records=10))


def test_a_parse_past_the_time_limit_is_killed_and_the_worker_recovers(tmp_path: Path) -> None:
    slow = tmp_path / "slow.html"
    slow.write_text("<div><p>段落 paragraph</p></div>\n" * 200_000, encoding="utf-8")
    with pytest.raises(DocumentTooLarge, match=r"slow\.html.*parse_seconds"):
        read_file(slow, limits=ReadLimits(parse_seconds=0.05))
    assert shared_worker().pids == []  # killed, not left running
    page = tmp_path / "page.html"
    page.write_text("<h1>退货政策</h1><p>拆封后 7 天内可退。</p>", encoding="utf-8")
    (doc,) = read_file(page)
    assert "7 天内可退" in doc.text


def test_a_parse_past_the_memory_limit_is_refused_and_the_worker_recovers(
    tmp_path: Path,
) -> None:
    path = big_docx(tmp_path / "huge.docx", paragraphs=150_000)
    with pytest.raises(DocumentTooLarge, match=r"huge\.docx.*memory.*parse_memory_mb"):
        read_file(path, limits=ReadLimits(parse_memory_mb=160))
    small = tmp_path / "small.docx"
    ok = docx.Document()
    ok.add_paragraph("保修期两年。")
    ok.save(str(small))
    (doc,) = read_file(small)
    assert doc.text == "保修期两年。"


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-8-sig"])
def test_text_with_a_byte_order_mark_is_read(tmp_path: Path, encoding: str) -> None:
    text = "退货政策：拆封后 7 天内可退。\r\nReturns are accepted within 7 days.\r\n"
    bom = {"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff", "utf-8-sig": b""}[encoding]
    path = tmp_path / "policy.txt"
    path.write_bytes(bom + text.encode(encoding))
    (doc,) = read_file(path)
    assert doc.text == "退货政策：拆封后 7 天内可退。\nReturns are accepted within 7 days."
    md = tmp_path / "policy.md"
    md.write_bytes(bom + ("# 退货\n" + text).encode(encoding))
    (doc,) = read_file(md)
    assert doc.title == "退货" and "within 7 days" in doc.text


def test_legacy_chinese_encodings_are_read() -> None:
    assert decode_text("保修期两年，E-203 表示滤网堵塞。".encode("gbk")) == (
        "保修期两年，E-203 表示滤网堵塞。"
    )


def test_a_folder_ingest_skips_bombs_with_reasons_and_ingests_the_rest(
    tmp_path: Path, bombs: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("bomb.pdf", "bomb.docx"):
        (docs / name).symlink_to(bombs / name)
    deep_json(docs / "deep.json")
    (docs / "returns.md").write_text("# 退货政策\n\n拆封后 7 天内可退。", encoding="utf-8")
    (docs / "faq.txt").write_bytes(b"\xff\xfe" + "Filter error E-203.".encode("utf-16-le"))
    (docs / "items.json").write_text(json.dumps([{"id": "p1", "name": "投影仪"}]), "utf-8")
    kb = open_embedded_store(tmp_path / "ws", None)
    try:
        report = kb.ingestor.ingest([docs])
        reasons = {f.source: f.reason for f in report.failed}
        assert set(reasons) == {"docs/bomb.pdf", "docs/bomb.docx", "docs/deep.json"}
        assert "max_decompressed_mb" in reasons["docs/bomb.pdf"]
        assert "max_decompressed_mb" in reasons["docs/bomb.docx"]
        assert "max_depth" in reasons["docs/deep.json"]
        assert sorted(report.added) == ["docs/faq.txt", "docs/items.json", "docs/returns.md"]
        hits = kb.retriever.search("E-203", k=3, mode="keyword")
        assert hits and hits[0].chunk.source == "docs/faq.txt"
    finally:
        kb.close()


def test_a_file_making_too_many_chunks_is_skipped(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.md").write_text(
        "\n\n".join(f"## 第 {n} 节\n\n" + "内容 words " * 200 for n in range(30)), "utf-8"
    )
    (docs / "short.md").write_text("# 保修\n\n保修期两年。", encoding="utf-8")
    kb = open_embedded_store(tmp_path / "ws", None, read_limits=ReadLimits(max_chunks=10))
    try:
        report = kb.ingestor.ingest([docs])
    finally:
        kb.close()
    assert [f.source for f in report.failed] == ["docs/long.md"]
    assert "max_chunks" in report.failed[0].reason
    assert report.added == ("docs/short.md",)


def test_limits_come_from_shelfhand_toml_and_bad_ones_fail_at_start(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "shelfhand.toml").write_text("[limits]\nmax_chars = 1000\nparse_seconds = 5\n", "utf-8")
    app = App(settings=Settings.load(ws, env={}))
    assert app.read_limits() == ReadLimits(max_chars=1000, parse_seconds=5.0)
    app.settings.workspace.mkdir(exist_ok=True)
    kb = app.open_knowledge(embed=False)
    kb.close()
    assert kb.read_limits.max_chars == 1000
    with pytest.raises(ConfigurationError, match=r"unknown key.*max_bytes"):
        ReadLimits.from_mapping({"max_bytes": 1})
    with pytest.raises(ConfigurationError, match="max_pages must be a number"):
        ReadLimits.from_mapping({"max_pages": "many"})
    with pytest.raises(ConfigurationError, match=r"positive.*max_depth"):
        ReadLimits.from_mapping({"max_depth": 0})


def test_a_worker_that_died_while_idle_is_replaced_without_blaming_the_next_file(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.html"
    page.write_text("<h1>保修</h1><p>Two-year warranty.</p>", encoding="utf-8")
    assert read_file(page)
    (pid,) = shared_worker().pids
    os.kill(pid, signal.SIGKILL)
    (doc,) = read_file(page)
    assert doc.title == "保修"
    assert len(shared_worker().pids) == 1 and shared_worker().pids != [pid]


def test_without_a_worker_process_the_risky_formats_are_read_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    page = tmp_path / "page.html"
    page.write_text("<h1>保修</h1><p>Two-year warranty.</p>", encoding="utf-8")
    shared_worker().close()
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    (doc,) = read_file(page)
    assert "Two-year warranty." in doc.text
    assert "cannot start the parser worker" in caplog.text
    with pytest.raises(DocumentTooLarge, match="max_depth"):  # the other limits still hold
        read_file(deep_json(tmp_path / "deep.json"))


def test_one_busy_worker_does_not_hold_up_the_next_file(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text("<h1>保修</h1><p>Two-year warranty.</p>", encoding="utf-8")
    pool = shared_worker()
    assert POOL_SIZE == 2
    done: list[str] = []
    with pool.borrow():  # as if a slow file kept this worker busy
        reader = threading.Thread(target=lambda: done.append(read_file(page)[0].title))
        reader.start()
        reader.join(60)  # with one worker this would wait for the borrowed one
        assert done == ["保修"]


def test_each_knowledge_base_reads_within_its_own_workspace_limits(tmp_path: Path) -> None:
    strict, relaxed = tmp_path / "strict", tmp_path / "relaxed"
    for ws in (strict, relaxed):
        ws.mkdir()
    (strict / "shelfhand.toml").write_text("[limits]\nmax_chars = 1000\n", encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.md").write_text("# 保修\n\n" + "保修期两年。" * 400, encoding="utf-8")
    # both open before either ingests: a limit set for the process would be the last one's
    bases = [
        App(settings=Settings.load(ws, env={})).open_knowledge(embed=False)
        for ws in (strict, relaxed)
    ]
    try:
        strict_report, relaxed_report = (kb.ingest([docs]) for kb in bases)
    finally:
        for kb in bases:
            kb.close()
    assert [f.source for f in strict_report.failed] == ["docs/long.md"]
    assert "max_chars" in strict_report.failed[0].reason
    assert relaxed_report.added == ("docs/long.md",) and not relaxed_report.failed


def test_a_file_over_the_byte_limit_is_refused_without_reading_it(tmp_path: Path) -> None:
    import tracemalloc

    docs = tmp_path / "docs"
    docs.mkdir()
    with open(docs / "huge.txt", "wb") as f:  # sparse: 256 MiB on paper, nothing on disk
        f.truncate(256 * MIB)
    (docs / "short.md").write_text("# 保修\n\n保修期两年。", encoding="utf-8")
    kb = open_embedded_store(tmp_path / "ws", None, read_limits=ReadLimits(max_file_mb=1))
    tracemalloc.start()
    try:
        report = kb.ingestor.ingest([docs])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        kb.close()
    assert [f.source for f in report.failed] == ["docs/huge.txt"]
    assert "max_file_mb" in report.failed[0].reason
    assert report.added == ("docs/short.md",)
    assert peak < 32 * MIB  # it was read whole (256 MiB) before the limit was checked


def test_a_pipe_or_device_named_like_a_document_is_skipped_not_waited_on(tmp_path: Path) -> None:
    # a pipe blocked the ingest forever (reading waits for a writer); /dev/zero never ends
    docs = tmp_path / "docs"
    docs.mkdir()
    os.mkfifo(docs / "notes.md")
    (docs / "zero.txt").symlink_to("/dev/zero")
    (docs / "short.md").write_text("# 保修\n\n保修期两年。", encoding="utf-8")
    kb = open_embedded_store(tmp_path / "ws", None)
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(kb.ingestor.ingest([docs])), daemon=True)
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():  # the pipe's reader is stuck: let it go, so that the test ends
        with open(docs / "notes.md", "wb"):
            pass
        worker.join(timeout=10)
        kb.close()
        pytest.fail("the ingest waited on the pipe")
    kb.close()
    (report,) = done
    reasons = {f.source: f.reason for f in report.failed}  # type: ignore[attr-defined]
    assert reasons == {
        "docs/notes.md": "not a regular file (a pipe, a device or a socket)",
        "docs/zero.txt": "not a regular file (a pipe, a device or a socket)",
    }
    assert report.added == ("docs/short.md",)  # type: ignore[attr-defined]
