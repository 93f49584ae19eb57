"""The reference scenario's demo database says what the bundled spec sheet says."""

from __future__ import annotations

from pathlib import Path

import docx

from shelfhand.knowledge.base import sample_corpus
from shelfhand.tools.demo import demo_database


def spec_rows() -> dict[str, tuple[str, int]]:
    sheet = docx.Document(str(sample_corpus() / "product-specs.docx"))
    rows: dict[str, tuple[str, int]] = {}
    for table in sheet.tables:
        for row in table.rows[1:]:
            cells = [c.text.strip() for c in row.cells]
            rows[cells[0]] = (cells[1], int(cells[-1].replace(",", "")))
    return rows


def test_every_demo_product_has_the_spec_sheets_name_and_list_price(tmp_path: Path) -> None:
    db = demo_database(tmp_path / "demo.db")
    products = {
        sku: (name, int(price))
        for sku, name, price in db.execute("SELECT sku, name, price FROM products")
    }

    assert products == spec_rows()


def test_the_demo_orders_are_for_products_the_spec_sheet_lists(tmp_path: Path) -> None:
    db = demo_database(tmp_path / "demo.db")
    skus = {sku for (sku,) in db.execute("SELECT sku FROM orders")}

    assert skus <= set(spec_rows())
