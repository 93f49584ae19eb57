"""Generate the binary files of the projector sample corpus (PDF and DOCX).

The generated files are committed to ``src/shelfhand/samples/projector/``; nothing generates
them at run time. Run again after editing the text below::

    python scripts/make_samples.py

Needs ``reportlab`` (dev extra) and ``python-docx``. The PDF uses reportlab's built-in CID font
``STSong-Light`` for Chinese (no font file is embedded, and pypdf extracts it as Unicode). Both
files are written reproducibly (fixed dates, fixed zip timestamps) so their hashes only change
when their content does.
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import zipfile
from pathlib import Path

from docx import Document as DocxDocument
from docx.shared import Pt
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Spacer

logger = logging.getLogger("make_samples")

OUT = Path(__file__).resolve().parent.parent / "src" / "shelfhand" / "samples" / "projector"
CJK_FONT = "STSong-Light"
PDF_TITLE = "Lumen Series Troubleshooting Manual"
PDF_HEADER = "BrightBeam Lumen Series - Troubleshooting Manual / 故障排除手册 (rev. 2025-03)"
FIXED_DATE = dt.datetime(2025, 3, 1, 9, 0, 0, tzinfo=dt.UTC)

# (kind, text): kind is "title", "h" (heading), "en" (English body), "zh" (Chinese body),
# "step" (numbered step, any language) or "page" (page break).
MANUAL: list[tuple[str, str]] = [
    ("title", "Lumen Series Troubleshooting Manual / Lumen 系列故障排除手册"),
    (
        "en",
        "When the projector detects a fault it shows an error code on the screen and the status "
        "light on the top cover blinks red. Write down the code before you switch the projector "
        "off: our support team will ask for it. Codes starting with E-1 concern cooling, E-2 the "
        "light source and E-3 the video input.",
    ),
    (
        "zh",
        "投影仪检测到故障时，会在画面上显示错误代码，机身顶部的状态指示灯闪烁红色。关机前请记下错误"
        "代码，联系客服时需要提供。以 E-1 开头的代码与散热有关，E-2 与光源有关，E-3 与视频输入有关。",
    ),
    ("h", "E-105 Fan failure / 风扇故障"),
    (
        "en",
        "The cooling fan does not spin or spins too slowly. The projector shuts down after 60 "
        "seconds to protect the optical engine.",
    ),
    ("step", "1. Switch the projector off and unplug the power cord."),
    ("step", "2. Check that nothing blocks the air intake and exhaust vents."),
    ("step", "3. Plug in again after 5 minutes. If E-105 returns, the fan needs replacing."),
    (
        "zh",
        "风扇故障：散热风扇不转或转速过低，投影仪会在 60 秒后自动关机以保护光机。请关机并拔下电源，"
        "检查进风口和出风口是否被遮挡，5 分钟后重新开机。如果仍然显示 E-105，需要更换风扇，请联系"
        "售后申请保修。",
    ),
    ("page", ""),
    ("h", "E-203 Lamp overheating / 灯泡过热"),
    (
        "en",
        "The lamp temperature is above the safe limit. This is usually caused by a blocked air "
        "filter, a room warmer than 35 °C, or the projector standing too close to a wall. The "
        "lamp switches off automatically and the fan keeps running to cool it down.",
    ),
    ("step", "1. Do not unplug the projector while the fan is still running."),
    ("step", "2. Wait 30 minutes until the lamp has cooled down."),
    ("step", "3. Clean the air filter and leave at least 30 cm of space around the projector."),
    ("step", "4. If E-203 appears again within an hour, stop using the projector."),
    (
        "zh",
        "灯泡过热（E-203）：灯泡温度超过安全上限，常见原因是防尘网堵塞、室温高于 35 °C 或投影仪离墙"
        "太近。灯泡会自动熄灭，风扇继续运转散热。请不要在风扇运转时拔掉电源；等待 30 分钟让灯泡冷却；"
        "清洁防尘网，并在投影仪四周留出至少 30 厘米的空间。如果一小时内再次出现 E-203，请停止使用"
        "并联系售后检测，灯泡在保修期内可免费更换。",
    ),
    ("page", ""),
    ("h", "E-310 No input signal / 无信号输入"),
    (
        "en",
        "The projector receives no picture from the selected input, or the HDMI handshake "
        "failed. Check that the source device is on and that the cable is firmly seated. Try "
        "another HDMI port, and select the right input with the SOURCE button. Cables longer "
        "than 10 m need an active HDMI cable.",
    ),
    (
        "zh",
        "无信号输入（E-310）：投影仪没有收到所选输入端口的画面，或 HDMI 握手失败。请确认信号源设备"
        "已开机、线缆插紧；尝试更换 HDMI 接口，并用遥控器上的 SOURCE 键选择正确的输入源。超过 10 米"
        "的线缆请使用有源 HDMI 线。",
    ),
    ("h", "Still need help? / 仍需帮助？"),
    (
        "en",
        "Contact after-sales support at 400-800-1234 (9:00 to 21:00 every day) with your order "
        "ID, the serial number on the bottom of the projector and the error code.",
    ),
    (
        "zh",
        "请拨打售后热线 400-800-1234（每天 9:00 至 21:00），并提供订单号、机身底部的序列号和错误代码。",
    ),
]

MODELS = [
    ("SKU2024-011", "Lumen X1", "3,000", "1920 × 1080 (Full HD)", "UHP lamp, 4,000 h", "3,999"),
    ("SKU2024-012", "Lumen X1 Pro", "3,600", "3840 × 2160 (4K UHD)", "Laser, 20,000 h", "5,999"),
    ("SKU2024-020", "Lumen Mini M2", "800", "1280 × 720 (HD)", "LED, 30,000 h", "1,999"),
    (
        "SKU2024-031",
        "Lumen Cinema C4K",
        "4,200",
        "3840 × 2160 (4K UHD)",
        "Laser, 25,000 h",
        "12,999",
    ),
]


def _header_footer(canvas: Canvas, doc: SimpleDocTemplate) -> None:
    """Draw the running header and the "Page N of M" footer that readers must strip."""
    width, height = A4
    canvas.saveState()
    canvas.setFont(CJK_FONT, 9)
    canvas.drawString(20 * mm, height - 12 * mm, PDF_HEADER)
    canvas.line(20 * mm, height - 14 * mm, width - 20 * mm, height - 14 * mm)
    canvas.drawCentredString(width / 2, 10 * mm, f"Page {doc.page} of {_page_count()}")
    canvas.restoreState()


def _page_count() -> int:
    return 1 + sum(1 for kind, _ in MANUAL if kind == "page")


def make_pdf(path: Path) -> None:
    """Write the bilingual troubleshooting manual (3 pages, header and footer on each)."""
    pdfmetrics.registerFont(UnicodeCIDFont(CJK_FONT))
    styles = {
        "title": ParagraphStyle("title", fontName=CJK_FONT, fontSize=16, leading=22, spaceAfter=8),
        "h": ParagraphStyle("h", fontName=CJK_FONT, fontSize=13, leading=18, spaceBefore=10),
        "en": ParagraphStyle("en", fontName="Helvetica", fontSize=10.5, leading=14, spaceAfter=6),
        "zh": ParagraphStyle(
            "zh", fontName=CJK_FONT, fontSize=10.5, leading=15, spaceAfter=6, wordWrap="CJK"
        ),
        "step": ParagraphStyle("step", fontName=CJK_FONT, fontSize=10.5, leading=14, leftIndent=12),
    }
    story: list[object] = []
    for kind, text in MANUAL:
        if kind == "page":
            story.append(PageBreak())
        else:
            story.append(Paragraph(text, styles[kind]))
    story.append(Spacer(1, 6))
    buffer = io.BytesIO()
    doc = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        title=PDF_TITLE,
        author="BrightBeam After-Sales",
        topMargin=22 * mm,
        bottomMargin=20 * mm,
        leftMargin=20 * mm,
        rightMargin=20 * mm,
        invariant=1,
    )
    doc.build(story, onFirstPage=_header_footer, onLaterPages=_header_footer)
    path.write_bytes(buffer.getvalue())


def make_docx(path: Path) -> None:
    """Write the English product specification sheet, with a table of models."""
    document = DocxDocument()
    props = document.core_properties
    props.title = "Lumen Series Product Specifications"
    props.author = "BrightBeam Product Team"
    props.created = props.modified = props.last_printed = FIXED_DATE
    props.revision = 1
    document.styles["Normal"].font.size = Pt(10.5)
    document.add_heading("Lumen Series Product Specifications", level=1)
    document.add_paragraph(
        "This sheet lists the current Lumen projector models sold by BrightBeam. Prices are "
        "list prices in CNY including VAT; dealers may offer discounts for orders of 10 units "
        "or more."
    )
    document.add_heading("Models at a glance", level=2)
    table = document.add_table(rows=1, cols=6)
    table.style = "Table Grid"
    header = ("SKU", "Model", "Brightness (ANSI lm)", "Resolution", "Light source", "Price (CNY)")
    for cell, text in zip(table.rows[0].cells, header, strict=True):
        cell.text = text
    for model in MODELS:
        for cell, text in zip(table.add_row().cells, model, strict=True):
            cell.text = text
    details = {
        "SKU2024-011": "The Lumen X1 is our best-selling home projector: 3,000 ANSI lumens, "
        "Full HD, a 1.2x optical zoom and two HDMI 2.0 inputs. Its UHP lamp lasts about 4,000 "
        "hours in eco mode; a replacement lamp (part LMP-X1) costs 499 CNY.",
        "SKU2024-012": "The Lumen X1 Pro adds native 4K and a laser light source that needs no "
        "lamp replacement. It supports HDR10 and a 240 Hz gaming mode with 4 ms input lag.",
        "SKU2024-020": "The Lumen Mini M2 is a portable LED projector with a built-in battery "
        "(2.5 hours of playback), Wi-Fi screen mirroring and a 5 W speaker. It weighs 0.9 kg.",
        "SKU2024-031": "The Lumen Cinema C4K is built for dedicated home theatres: 4,200 ANSI "
        "lumens, lens shift, motorised focus and a 3,000,000:1 dynamic contrast ratio.",
    }
    for sku, name, *_rest in MODELS:
        document.add_heading(f"{name} ({sku})", level=2)
        document.add_paragraph(details[sku])
    document.add_heading("Common to all models", level=2)
    document.add_paragraph(
        "All models have an M4 ceiling-mount thread, a replaceable dust filter, a remote "
        "control (2 x AAA batteries included) and a 100-240 V power supply. Noise is below "
        "30 dB in eco mode. The warranty period is set by the warranty policy in force on the "
        "purchase date."
    )
    buffer = io.BytesIO()
    document.save(buffer)
    path.write_bytes(_fixed_zip_times(buffer.getvalue()))


def _fixed_zip_times(data: bytes) -> bytes:
    """Rewrite a zip with fixed timestamps so the same content gives the same bytes."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(2025, 3, 1, 9, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            target.writestr(fixed, source.read(info.filename))
    return out.getvalue()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    OUT.mkdir(parents=True, exist_ok=True)
    make_pdf(OUT / "troubleshooting-manual.pdf")
    make_docx(OUT / "product-specs.docx")
    for name in ("troubleshooting-manual.pdf", "product-specs.docx"):
        logger.info("wrote %s (%d bytes)", OUT / name, (OUT / name).stat().st_size)


if __name__ == "__main__":
    main()
