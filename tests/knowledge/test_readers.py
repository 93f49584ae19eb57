"""Readers: every format, in English and Chinese, and every way a file can be unreadable."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

import docx
import pytest
from docx.enum.style import WD_STYLE_TYPE
from pypdf import PdfWriter
from reportlab.lib.pagesizes import A4
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.pdfgen.canvas import Canvas

from shelfhand.core.errors import UnreadableDocumentError
from shelfhand.knowledge.reading.readers import (
    SUPPORTED_SUFFIXES,
    clean_pdf_pages,
    decode_text,
    iter_files,
    read_file,
)
from shelfhand.knowledge.types import Document

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLES = Path(str(files("shelfhand") / "samples" / "projector"))
CJK_FONT = "STSong-Light"


def write_pdf(
    path: Path,
    pages: list[list[str]],
    *,
    header: str | None = None,
    footer: Callable[[int, int], str] | None = None,
    title: str | None = None,
) -> Path:
    """A PDF whose lines are drawn exactly as given (so line breaks are under test control)."""
    pdfmetrics.registerFont(UnicodeCIDFont(CJK_FONT))
    canvas = Canvas(str(path), pagesize=A4, invariant=1)
    if title:
        canvas.setTitle(title)
    for number, lines in enumerate(pages, start=1):
        canvas.setFont(CJK_FONT, 10)
        if header:
            canvas.drawString(50, 800, header)
        for row, line in enumerate(lines):
            canvas.drawString(50, 760 - 14 * row, line)
        if footer:
            canvas.drawCentredString(300, 30, footer(number, len(pages)))
        canvas.showPage()
    canvas.save()
    return path


MANUAL_PAGES = [
    [
        "E-203 灯泡过热",
        "投影仪检测到灯泡温度过高时会自动熄灭灯泡，风扇继续运转散热，请不要立即",
        "拔掉电源。",
        "The replacement lamp must be installed by a quali-",
        "fied technician, and the projector must cool",
        "down for thirty minutes first.",
    ],
    [
        "E-105 风扇故障",
        "Steps:",
        "1. Switch the projector off.",
        "2. Check the air vents.",
    ],
    ["E-310 无信号输入", "请检查 HDMI 线缆是否插紧。"],
]


@pytest.fixture
def manual_pdf(tmp_path: Path) -> Path:
    return write_pdf(
        tmp_path / "manual.pdf",
        MANUAL_PAGES,
        header="Lumen 故障排除手册 · Troubleshooting Manual",
        footer=lambda n, total: f"Page {n} of {total}",
        title="Lumen Manual",
    )


def assert_sections_line_up(doc: Document) -> None:
    for section in doc.sections:
        assert doc.text[section.start : section.start + len(section.text)] == section.text


# --- Markdown and text -----------------------------------------------------------------------


def test_markdown_headings_become_section_paths_and_front_matter_is_honoured(
    tmp_path: Path,
) -> None:
    path = tmp_path / "保修.md"
    path.write_text(
        "---\ntitle: 保修政策\npermissions:\n  - support\n  - admin\n---\n"
        "开头的说明。\n\n# 保修政策\n\n## 保修期限\n整机保修 12 个月。\n\n"
        "### 光源\nLamp: 6 months.\n\n## 如何申请 ##\n联系客服。\n",
        encoding="utf-8",
    )
    [doc] = read_file(path, permission_tags=["admin", "sales"])
    assert doc.title == "保修政策"
    assert doc.doc_type == "markdown"
    assert doc.permission_tags == ("admin", "sales", "support")
    assert [(s.section_path, s.text) for s in doc.sections] == [
        ((), "开头的说明。"),
        (("保修政策", "保修期限"), "整机保修 12 个月。"),
        (("保修政策", "保修期限", "光源"), "Lamp: 6 months."),
        (("保修政策", "如何申请"), "联系客服。"),
    ]
    assert "title:" not in doc.text and "---" not in doc.text
    assert_sections_line_up(doc)


def test_markdown_title_falls_back_to_the_first_h1_then_the_file_stem(tmp_path: Path) -> None:
    with_h1 = tmp_path / "a.md"
    with_h1.write_text("Intro.\n\n# Returns Policy\n\nUnopened: 30 days.\n", encoding="utf-8")
    without = tmp_path / "release-notes.markdown"
    without.write_text("## Fixed\n\nE-203 shows less often.\n", encoding="utf-8")
    assert read_file(with_h1)[0].title == "Returns Policy"
    assert read_file(without)[0].title == "release-notes"


def test_markdown_hash_lines_inside_code_fences_are_not_headings(tmp_path: Path) -> None:
    path = tmp_path / "code.md"
    path.write_text("# Setup\n\n```bash\n# not a heading\nls\n```\n", encoding="utf-8")
    [doc] = read_file(path)
    assert [s.section_path for s in doc.sections] == [("Setup",)]
    assert "# not a heading" in doc.text


def _headings_docx(path: Path) -> None:
    document = docx.Document()
    document.add_heading("年假政策", level=1)
    document.add_heading("申请流程", level=2)
    document.save(str(path))


@pytest.mark.parametrize(
    ("name", "write"),
    [
        ("leave.md", lambda p: p.write_text("# 年假政策\n\n## 申请流程\n", encoding="utf-8")),
        (
            "leave.html",
            lambda p: p.write_text("<h1>年假政策</h1><h2>申请流程</h2>", encoding="utf-8"),
        ),
        ("leave.docx", _headings_docx),
    ],
)
def test_a_file_of_headings_alone_is_read_as_their_text(
    tmp_path: Path, name: str, write: Callable[[Path], object]
) -> None:
    path = tmp_path / name
    write(path)

    [doc] = read_file(path)

    assert doc.text == "年假政策\n申请流程"


def test_gb18030_chinese_text_is_decoded(tmp_path: Path) -> None:
    path = tmp_path / "说明.txt"
    path.write_bytes("投影仪的保修期为 24 个月。\r\n请保留发票。".encode("gb18030"))
    [doc] = read_file(path)
    assert doc.text == "投影仪的保修期为 24 个月。\n请保留发票。"
    assert doc.doc_type == "text"
    assert doc.title == "说明"


def test_utf8_bom_is_dropped() -> None:
    assert decode_text("\ufeffhello 你好".encode()) == "hello 你好"


def test_undecodable_text_is_unreadable_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "blob.txt"
    path.write_bytes(b"\xff\xfe\xff\xff binary")
    with pytest.raises(UnreadableDocumentError, match=r"blob\.txt.*not UTF-8.*GB18030"):
        read_file(path)


def test_file_documents_carry_source_hash_mtime_tenant_and_tags(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("Lamp life: 4000 hours.", encoding="utf-8")
    os.utime(path, (1_700_000_000, 1_700_000_000))
    [doc] = read_file(path, tenant_id="acme", permission_tags=["support"])
    assert doc.source == doc.doc_id == str(path)
    assert doc.content_hash == hashlib.sha256(path.read_bytes()).hexdigest()
    assert doc.updated_at == 1_700_000_000
    assert (doc.tenant_id, doc.permission_tags) == ("acme", ("support",))
    assert read_file(path, source="docs/notes.txt")[0].doc_id == "docs/notes.txt"


# --- HTML ------------------------------------------------------------------------------------


def test_html_drops_scripts_styles_and_page_chrome_and_keeps_headings() -> None:
    [doc] = read_file(FIXTURES / "faq-zh.html")
    assert doc.title == "常见问题"
    assert doc.doc_type == "html"
    for chrome in ("脚本内容", "color: red", "顶部导航", "商城", "版权所有"):
        assert chrome not in doc.text
    paths = {s.section_path: s.text for s in doc.sections}
    assert paths[("投影仪常见问题",)] == "这里汇总了售后团队最常遇到的问题。"
    assert "同一个 Wi-Fi 网络" in paths[("投影仪常见问题", "连接", "如何连接手机？")]
    assert paths[("投影仪常见问题", "参数")] == "型号 | 亮度\nLumen X1 | 3000 流明"
    assert_sections_line_up(doc)


def test_english_html_sample_reads_questions_as_sections() -> None:
    [doc] = read_file(SAMPLES / "faq.html", source="faq.html")
    assert doc.title == "BrightBeam Projector FAQ"
    lens = next(s for s in doc.sections if s.section_path[-1] == "How do I clean the lens?")
    assert lens.section_path[:2] == ("Frequently asked questions", "Care")
    assert "microfiber lens cloth" in lens.text
    assert "analytics" not in doc.text and "My account" not in doc.text


# --- PDF -------------------------------------------------------------------------------------


def test_pdf_pages_become_sections_without_headers_footers_or_page_numbers(
    manual_pdf: Path,
) -> None:
    [doc] = read_file(manual_pdf)
    assert doc.doc_type == "pdf"
    assert doc.title == "Lumen Manual"
    assert [s.page for s in doc.sections] == [1, 2, 3]
    assert "Troubleshooting Manual" not in doc.text
    assert "Page" not in doc.text
    assert doc.sections[2].text == "E-310 无信号输入\n请检查 HDMI 线缆是否插紧。"
    assert_sections_line_up(doc)


def test_pdf_lines_broken_mid_sentence_are_rejoined(manual_pdf: Path) -> None:
    first, second, _ = read_file(manual_pdf)[0].sections
    # CJK lines join without a space; a heading line stays on its own line.
    assert first.text.startswith(
        "E-203 灯泡过热\n投影仪检测到灯泡温度过高时会自动熄灭灯泡，风扇继续运转散热，请不要立即拔掉电源。\n"
    )
    # English line-end hyphens are removed and broken lines joined with one space.
    assert first.text.endswith(
        "The replacement lamp must be installed by a qualified technician, and the projector "
        "must cool down for thirty minutes first."
    )
    # Numbered steps stay separate lines.
    assert second.text == (
        "E-105 风扇故障\nSteps:\n1. Switch the projector off.\n2. Check the air vents."
    )


@pytest.mark.parametrize("number", ["3", "- 3 -", "— 3 —", "第 3 页", "Page 3 of 9", "3 / 9"])
def test_bare_page_numbers_are_removed_even_on_a_single_page(number: str) -> None:
    assert clean_pdf_pages([f"{number}\nBody text.\n{number}"]) == ["Body text."]


def test_repeated_headers_with_changing_numbers_are_removed_but_body_lines_are_kept() -> None:
    bodies = ["Clean the filter.", "Check the fan.", "检查线缆。"]
    pages = [f"ACME Manual · {n}\n{body}\n{n} / 3\nFooter note" for n, body in enumerate(bodies, 1)]
    assert clean_pdf_pages(pages) == bodies


def test_a_line_at_the_top_of_only_one_page_is_not_a_header() -> None:
    cleaned = clean_pdf_pages(["Intro\nFirst page.", "Details\nSecond page.", "End\nLast page."])
    assert cleaned == ["Intro\nFirst page.", "Details\nSecond page.", "End\nLast page."]


def test_a_code_broken_across_lines_keeps_its_hyphen() -> None:
    line = "If the projector shows the code E-"
    assert clean_pdf_pages([f"{line}\n203 then clean the filter."]) == [
        "If the projector shows the code E-203 then clean the filter."
    ]


def test_password_protected_pdf_is_refused_with_a_clear_message(
    manual_pdf: Path, tmp_path: Path
) -> None:
    writer = PdfWriter(clone_from=manual_pdf)
    writer.encrypt(user_password="secret", owner_password="owner")
    locked = tmp_path / "locked.pdf"
    writer.write(locked)
    with pytest.raises(UnreadableDocumentError, match=r"locked\.pdf.*password"):
        read_file(locked)


def test_pdf_encrypted_with_an_empty_user_password_is_read(
    manual_pdf: Path, tmp_path: Path
) -> None:
    writer = PdfWriter(clone_from=manual_pdf)
    writer.encrypt(user_password="", owner_password="owner", algorithm="AES-128")
    restricted = tmp_path / "restricted.pdf"
    writer.write(restricted)
    [doc] = read_file(restricted)
    assert "请检查 HDMI 线缆是否插紧。" in doc.text


@pytest.mark.parametrize("keep", [0.3, 0.8])
def test_truncated_pdf_is_unreadable(manual_pdf: Path, tmp_path: Path, keep: float) -> None:
    data = manual_pdf.read_bytes()
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(UnreadableDocumentError, match=r"broken\.pdf.*corrupt"):
        read_file(broken)


def test_pdf_without_text_is_unreadable(tmp_path: Path) -> None:
    blank = write_pdf(tmp_path / "scan.pdf", [[], []])
    with pytest.raises(UnreadableDocumentError, match="no extractable text"):
        read_file(blank)


# --- DOCX ------------------------------------------------------------------------------------


def test_docx_headings_paragraphs_and_tables(tmp_path: Path) -> None:
    document = docx.Document()
    document.styles.add_style("标题 1", WD_STYLE_TYPE.PARAGRAPH)
    document.add_paragraph("Lumen 产品手册", style="Title")
    document.add_paragraph("Intro paragraph.")
    document.add_paragraph("产品参数", style="标题 1")
    document.add_paragraph("亮度 3000 流明。")
    document.add_heading("Prices", level=2)
    table = document.add_table(rows=2, cols=2)
    for row, values in zip(table.rows, [("SKU", "Price"), ("SKU2024-011", "3999")], strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    path = tmp_path / "specs.docx"
    document.save(str(path))

    [doc] = read_file(path)
    assert doc.doc_type == "docx"
    assert doc.title == "Lumen 产品手册"
    assert [(s.section_path, s.text) for s in doc.sections] == [
        ((), "Intro paragraph."),
        (("产品参数",), "亮度 3000 流明。"),
        (("产品参数", "Prices"), "SKU | Price\nSKU2024-011 | 3999"),
    ]
    assert_sections_line_up(doc)


def test_invalid_docx_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "specs.docx"
    path.write_bytes(b"PK\x03\x04 this is not really a zip")
    with pytest.raises(UnreadableDocumentError, match=r"specs\.docx.*not a valid DOCX"):
        read_file(path)


# --- records ---------------------------------------------------------------------------------


def test_csv_rows_become_records_keyed_by_their_primary_key() -> None:
    docs = read_file(FIXTURES / "products.csv", source="products.csv")
    assert [d.doc_id for d in docs] == [
        "products.csv#SKU2024-011",
        "products.csv#SKU2024-012",
        "products.csv#SKU2024-020",
    ]
    first = docs[0]
    assert (first.source, first.title, first.doc_type) == ("products.csv", "Lumen X1", "csv")
    assert first.text == (
        "sku: SKU2024-011\nname: Lumen X1\nbrightness: 3000\nprice: 3999\n备注: 家用畅销款"
    )
    assert "备注" not in docs[2].text  # empty values are left out
    assert first.metadata["key"] == "SKU2024-011"
    assert first.metadata["record"]["price"] == "3999"
    assert len({d.content_hash for d in docs}) == 3


def test_csv_without_an_id_column_uses_the_first_column_and_numbers_duplicates(
    tmp_path: Path,
) -> None:
    path = tmp_path / "codes.csv"
    path.write_text("code,含义\nE-203,灯泡过热\nE-105,风扇故障\nE-203,重复\n", encoding="utf-8")
    docs = read_file(path, source="codes.csv")
    assert [d.doc_id for d in docs] == ["codes.csv#E-203", "codes.csv#E-105", "codes.csv#row-3"]
    assert docs[0].title == "E-203"
    assert docs[0].text == "code: E-203\n含义: 灯泡过热"


def test_jsonl_records_keep_order_id_and_source() -> None:
    docs = read_file(FIXTURES / "orders.jsonl", source="orders.jsonl", tenant_id="t1")
    assert [d.doc_id for d in docs] == ["orders.jsonl#A1001", "orders.jsonl#A1002"]
    assert all(d.source == "orders.jsonl" and d.tenant_id == "t1" for d in docs)
    assert docs[0].doc_type == "json"
    assert "customer: 张伟" in docs[0].text
    assert 'items: [{"sku": "SKU2024-011", "qty": 1}]' in docs[0].text
    record = json.loads((FIXTURES / "orders.jsonl").read_text(encoding="utf-8").split("\n")[0])
    canonical = json.dumps(record, ensure_ascii=False, sort_keys=True)
    assert docs[0].content_hash == hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def test_json_list_of_objects_is_read_as_records(tmp_path: Path) -> None:
    path = tmp_path / "skus.json"
    path.write_text(json.dumps([{"SKU": "X1", "title": "Lumen X1"}, {"SKU": "M2"}]), "utf-8")
    docs = read_file(path)
    assert [(d.doc_id, d.title) for d in docs] == [
        (f"{path}#X1", "Lumen X1"),
        (f"{path}#M2", "M2"),
    ]


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("bad.jsonl", '{"id": 1}\n{"id": 2\n', "invalid JSON on line 2"),
        ("bad.json", "[1, 2, 3]", "list of JSON objects"),
        ("empty.json", "[]", "no records"),
        ("blank.md", "  \n\n", "empty"),
        ("slides.pptx", "binary", "unsupported file type '.pptx'"),
    ],
)
def test_unreadable_inputs_say_which_file_and_why(
    tmp_path: Path, name: str, content: str, why: str
) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UnreadableDocumentError, match=name.replace(".", r"\.")) as caught:
        read_file(path)
    assert why in str(caught.value)


def test_missing_file_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableDocumentError, match=r"missing\.md"):
        read_file(tmp_path / "missing.md")


# --- walking directories ---------------------------------------------------------------------


def test_iter_files_walks_sorted_and_skips_hidden_and_unsupported(tmp_path: Path) -> None:
    for name in ["b.md", "a/z.txt", "a/c.pdf", ".git/x.md", "a/.hidden.md", "img.png", "c.JSON"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x", encoding="utf-8")
    extra = tmp_path / "img.png"
    found = [p.relative_to(tmp_path).as_posix() for p in iter_files([tmp_path, extra])]
    assert found == ["b.md", "c.JSON", "a/c.pdf", "a/z.txt", "img.png"]
    with pytest.raises(UnreadableDocumentError, match="no such file"):
        list(iter_files([tmp_path / "nope"]))


# --- the bundled sample corpus ---------------------------------------------------------------


def test_every_sample_file_reads_without_error() -> None:
    paths = list(iter_files([SAMPLES]))
    names = {p.name for p in paths}
    assert {
        "warranty-policy-v1.md",
        "warranty-policy-v2.md",
        "returns-policy.md",
        "troubleshooting-manual.pdf",
        "product-specs.docx",
        "faq.html",
    } <= names
    assert "eval.jsonl" not in names  # eval cases live beside the corpus, never inside it
    for path in paths:
        assert path.suffix in SUPPORTED_SUFFIXES
        for doc in read_file(path, source=path.name):
            assert doc.text.strip()
            assert_sections_line_up(doc)


def test_sample_warranty_versions_disagree_on_the_warranty_period() -> None:
    [v1] = read_file(SAMPLES / "warranty-policy-v1.md")
    [v2] = read_file(SAMPLES / "warranty-policy-v2.md")
    period = ("明光投影仪保修政策（第 1 版）", "保修期限")
    assert "12 个月" in next(s.text for s in v1.sections if s.section_path == period)
    assert "24 个月" in next(s.text for s in v2.sections if s.section_path[1:] == period[1:])


def test_sample_manual_pdf_extracts_clean_chinese_and_english_text() -> None:
    [doc] = read_file(SAMPLES / "troubleshooting-manual.pdf")
    assert [s.page for s in doc.sections] == [1, 2, 3]
    assert "rev. 2025-03" not in doc.text and "Page 2 of 3" not in doc.text
    page2 = doc.sections[1].text
    assert page2.startswith("E-203 Lamp overheating / 灯泡过热")
    assert "灯泡温度超过安全上限，常见原因是防尘网堵塞、室温高于 35 °C 或投影仪离墙太近。" in page2


def test_sample_specs_docx_has_the_model_table() -> None:
    [doc] = read_file(SAMPLES / "product-specs.docx")
    table = next(s for s in doc.sections if s.section_path[-1] == "Models at a glance")
    assert "SKU2024-011 | Lumen X1 | 3,000 | 1920 × 1080 (Full HD)" in table.text


def test_sample_eval_cases_point_at_sample_files() -> None:
    lines = (SAMPLES.parent / "projector-eval.jsonl").read_text(encoding="utf-8").splitlines()
    cases = [json.loads(line) for line in lines if line.strip()]
    assert 8 <= len(cases) <= 12
    assert any("E-203" in c["query"] for c in cases)
    for case in cases:
        assert case["relevant"]
        assert all((SAMPLES / name).is_file() for name in case["relevant"])


def test_a_short_line_ending_a_paragraph_is_not_joined_to_the_next_heading() -> None:
    page = (
        "The projector receives no picture from the selected input, or the HDMI\n"
        "handshake failed\n"
        "E-310 No input signal\n"
        "Check the cable."
    )
    assert clean_pdf_pages([page]) == [
        "The projector receives no picture from the selected input, or the HDMI handshake "
        "failed\nE-310 No input signal\nCheck the cable."
    ]
