"""Bounded reading: what the parser worker costs, and how fast hostile files are refused.

    python bench/readers.py            # default limits, 20 rounds over the sample corpus
    python bench/readers.py --rounds 5 --json out.json

Reports (wall-clock, this machine):

* worker start: the first PDF read of a fresh process (spawns the worker, imports pypdf there);
* per-file read time of the bundled sample corpus (PDF, DOCX, HTML through the worker; Markdown
  in-process), against the same readers called in-process (``parse_in_process``): the
  difference is the worker's per-file cost (pickling and the pipe round trip);
* time to refuse each hostile file with the default limits: a PDF whose 200 KiB stream
  inflates to 200 MiB, a DOCX with a 150 MiB zip-bomb part, a DOCX holding 50 MiB of text
  (the issue's 463 s case), and a JSON file of 100,000 nested ``[``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import zipfile
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from shelfhand.core.errors import UnreadableDocumentError
from shelfhand.knowledge.base import sample_corpus
from shelfhand.knowledge.reading.formats import parse_in_process
from shelfhand.knowledge.reading.limits import ReadLimits
from shelfhand.knowledge.reading.parse_worker import shared_worker
from shelfhand.knowledge.reading.readers import read_file
from shelfhand.knowledge.reading.source import ReadInput as _Input

MIB = 1024 * 1024


def pdf_bomb(path: Path, zeros_mib: int) -> Path:
    packer = zlib.compressobj(1)
    stream = b"".join(packer.compress(b"\0" * MIB) for _ in range(zeros_mib)) + packer.flush()
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


def docx_with(path: Path, template: Path, extra: dict[str, bytes], body: bytes | None) -> Path:
    with zipfile.ZipFile(template) as original:
        parts = {name: original.read(name) for name in original.namelist()}
    if body is not None:
        xml = parts["word/document.xml"].decode("utf-8")
        head = xml[: xml.index("<w:body>") + len("<w:body>")]
        parts["word/document.xml"] = head.encode() + body + b"</w:body></w:document>"
    parts.update(extra)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    return path


def timed(fn: Any) -> tuple[float, str]:
    t0 = time.perf_counter()
    try:
        fn()
        outcome = "read"
    except UnreadableDocumentError as exc:
        outcome = f"{type(exc).__name__}: {str(exc).split(': ', 1)[-1][:90]}"
    return time.perf_counter() - t0, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    limits = ReadLimits()
    corpus = sorted(sample_corpus().iterdir())
    results: dict[str, Any] = {"limits": limits.as_dict()}

    pdf = next(p for p in corpus if p.suffix == ".pdf")
    start, _ = timed(lambda: read_file(pdf))
    results["worker_first_read_s"] = round(start, 3)
    print(f"first PDF read (starts the worker): {start * 1000:.0f} ms")

    print(f"\n{'file':32} {'read_file ms':>13} {'in-process ms':>14}")
    per_file: dict[str, dict[str, float]] = {}
    for path in corpus:
        item = _Input(
            path=path,
            source=path.name,
            data=path.read_bytes(),
            mtime=0.0,
            tenant_id="default",
            permission_tags=(),
            limits=limits,
        )
        via, direct = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            read_file(path)
            via.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            parse_in_process(replace(item), limits)
            direct.append(time.perf_counter() - t0)
        row = {
            "read_file_ms": statistics.median(via) * 1000,
            "in_process_ms": statistics.median(direct) * 1000,
        }
        per_file[path.name] = {k: round(v, 2) for k, v in row.items()}
        print(f"{path.name:32} {row['read_file_ms']:13.2f} {row['in_process_ms']:14.2f}")
    results["per_file_median"] = per_file

    print("\nhostile files, default limits:")
    hostile: dict[str, dict[str, Any]] = {}
    docx = next(p for p in corpus if p.suffix == ".docx")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        para = b"<w:p><w:r><w:t>" + ("text words " * 90).encode() + b"</w:t></w:r></w:p>"
        cases = {
            "pdf_200MiB_stream.pdf": pdf_bomb(folder / "bomb.pdf", 200),
            "docx_150MiB_part.docx": docx_with(
                folder / "bomb.docx", docx, {"word/media/bomb.bin": b"\0" * (150 * MIB)}, None
            ),
            "docx_50MiB_text.docx": docx_with(
                folder / "text.docx", docx, {}, para * (50 * MIB // len(para))
            ),
            "json_100k_deep.json": folder / "deep.json",
        }
        cases["json_100k_deep.json"].write_text("[" * 100_000 + "]" * 100_000, "utf-8")
        for name, path in cases.items():
            seconds, outcome = timed(lambda path=path: read_file(path))
            hostile[name] = {
                "bytes_on_disk": path.stat().st_size,
                "seconds": round(seconds, 3),
                "outcome": outcome,
            }
            print(f"  {name:24} {path.stat().st_size:>10} B  {seconds:6.2f} s  {outcome}")
    results["hostile"] = hostile
    shared_worker().close()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
