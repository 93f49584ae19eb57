"""JSON Schema from type hints and docstrings (docs/design.md T1, T3)."""

from __future__ import annotations

import enum
import json
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, Field

from shelfhand.core.context import RunContext, UserContext
from shelfhand.tools import Toolkit, tool
from shelfhand.tools.schema import function_schema, parse_docstring


@tool(read_only=True)
def lookup_order(
    ctx: UserContext, order_id: str, detail: Literal["brief", "full"] = "brief"
) -> dict:
    """Look up one of the caller's orders.

    Args:
        order_id: The order number, e.g. SO-1001.
        detail: How much to return.
    """
    return {"order": order_id, "owner": ctx.user_id, "status": "shipped"}


class Color(enum.Enum):
    """A projector casing colour."""

    WHITE = "white"
    BLACK = "black"


class Address(BaseModel):
    """Where to ship."""

    city: str = Field(description="City name")
    street: str
    zip_code: str | None = None


class Shipment(BaseModel):
    address: Address
    items: list[str]


class Category(BaseModel):
    name: str
    children: list[Category] = []


def _params(fn: Any, **kw: Any) -> dict[str, Any]:
    return tool(**kw)(fn).schema()["function"]["parameters"]  # type: ignore[no-any-return]


def test_the_reference_example_hides_the_user_context_and_lists_the_enum() -> None:
    kit = Toolkit([lookup_order])
    params = kit.schemas()[0]["function"]["parameters"]
    assert set(params["properties"]) == {"order_id", "detail"}
    assert params["required"] == ["order_id"]
    assert params["properties"]["detail"]["enum"] == ["brief", "full"]
    assert params["properties"]["order_id"]["description"] == "The order number, e.g. SO-1001."
    assert params["properties"]["detail"]["description"] == "How much to return."
    function = kit.schemas()[0]["function"]
    assert function["name"] == "lookup_order"
    assert function["description"] == "Look up one of the caller's orders."
    assert "strict" not in function


def test_schema_is_openai_function_format_without_pydantic_titles() -> None:
    schema = lookup_order.schema()
    assert schema["type"] == "function"
    text = json.dumps(schema)
    assert '"title"' not in text
    assert schema["function"]["parameters"]["type"] == "object"


def test_a_parameter_named_title_is_kept_while_schema_titles_are_dropped() -> None:
    def rename(title: str, note: str = "") -> str:
        """Rename a document."""
        return title

    params = _params(rename)
    assert set(params["properties"]) == {"title", "note"}
    assert "title" not in params["properties"]["title"]


def test_google_docstring_with_types_and_continuation_lines() -> None:
    def quote_price(sku: str, quantity: int = 1) -> str:
        """Quote a price for a product.

        Prices include VAT.

        Args:
            sku (str): The product SKU,
                e.g. SKU2024-011.
            quantity: How many units.

        Returns:
            The price as text.
        """
        return sku

    spec = function_schema(quote_price)
    assert spec.description == "Quote a price for a product.\n\nPrices include VAT."
    props = spec.parameters["properties"]
    assert props["sku"]["description"] == "The product SKU, e.g. SKU2024-011."
    assert props["quantity"]["description"] == "How many units."
    assert props["quantity"]["default"] == 1
    assert spec.parameters["required"] == ["sku"]


def test_rest_docstring_params() -> None:
    def query_stock(sku: str, warehouse: str = "main") -> str:
        """Check stock for a SKU.

        :param sku: The product SKU.
        :param str warehouse: Which warehouse,
            defaults to the main one.
        :returns: stock text
        """
        return sku

    spec = function_schema(query_stock)
    assert spec.description == "Check stock for a SKU."
    props = spec.parameters["properties"]
    assert props["sku"]["description"] == "The product SKU."
    assert props["warehouse"]["description"] == "Which warehouse, defaults to the main one."


def test_chinese_docstring_becomes_the_description() -> None:
    def create_return(order_id: str, reason: str) -> str:
        """为订单创建退货申请。

        Args:
            order_id: 订单号，例如 SO-1001。
            reason: 退货原因。
        """
        return order_id

    spec = function_schema(create_return)
    assert spec.description == "为订单创建退货申请。"
    assert spec.parameters["properties"]["order_id"]["description"] == "订单号，例如 SO-1001。"
    assert spec.parameters["properties"]["reason"]["description"] == "退货原因。"


def test_numpy_docstring_params() -> None:
    doc = parse_docstring(
        """Sum two numbers.

        Parameters
        ----------
        a : int
            First number.
        b : int
            Second number.
        """
    )
    assert doc.description == "Sum two numbers."
    assert doc.params == {"a": "First number.", "b": "Second number."}


def test_optional_parameters_are_nullable_and_not_required() -> None:
    def search(query: str, limit: Optional[int] = None, page: int | None = None) -> str:  # noqa: UP045
        """Search."""
        return query

    params = _params(search)
    assert params["required"] == ["query"]
    assert params["properties"]["limit"]["type"] == ["integer", "null"]
    assert params["properties"]["page"]["type"] == ["integer", "null"]


def test_an_optional_without_default_is_required() -> None:
    def f(note: str | None) -> str:
        """F."""
        return ""

    params = _params(f)
    assert params["required"] == ["note"]
    assert params["properties"]["note"]["type"] == ["string", "null"]


def test_enum_parameter_becomes_an_inlined_enum_with_its_values() -> None:
    def paint(color: Color) -> str:
        """Paint."""
        return color.value

    params = _params(paint)
    assert params["properties"]["color"]["enum"] == ["white", "black"]
    assert "$defs" not in params
    assert "$ref" not in json.dumps(params)


def test_single_literal_becomes_a_one_value_enum() -> None:
    def f(mode: Literal["fast"]) -> str:
        """F."""
        return mode

    assert _params(f)["properties"]["mode"]["enum"] == ["fast"]


def test_pydantic_models_stay_nested_and_inlined() -> None:
    def ship(shipment: Shipment, note: str = "") -> str:
        """Ship something."""
        return note

    params = _params(ship)
    shipment = params["properties"]["shipment"]
    assert shipment["type"] == "object"
    address = shipment["properties"]["address"]
    assert address["type"] == "object"
    assert address["description"] == "Where to ship."
    assert address["properties"]["city"]["description"] == "City name"
    assert address["required"] == ["city", "street"]
    assert shipment["properties"]["items"] == {"type": "array", "items": {"type": "string"}}
    assert "$ref" not in json.dumps(params)


def test_recursive_models_keep_their_defs() -> None:
    def classify(category: Category) -> str:
        """Classify."""
        return category.name

    params = _params(classify)
    assert params["properties"]["category"]["$ref"] == "#/$defs/Category"
    assert "Category" in params["$defs"]


def test_annotated_string_and_field_descriptions() -> None:
    def f(
        sku: Annotated[str, "The product SKU"],
        qty: Annotated[int, Field(description="Units", ge=1)] = 1,
        note: Annotated[str, "From Annotated"] = "",
    ) -> str:
        """F.

        Args:
            note: From the docstring.
            qty: Docstring loses to the Field.
        """
        return sku

    props = _params(f)["properties"]
    assert props["sku"]["description"] == "The product SKU"
    assert props["qty"]["description"] == "Units"
    assert props["qty"]["minimum"] == 1
    assert props["note"]["description"] == "From Annotated"


def test_lists_dicts_and_tuples() -> None:
    def f(tags: list[str], counts: dict[str, int], pair: tuple[int, str]) -> str:
        """F."""
        return ""

    props = _params(f)["properties"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["counts"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["pair"]["type"] == "array"
    assert props["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]


def test_strict_mode_requires_everything_and_makes_optionals_nullable() -> None:
    def f(shipment: Shipment, detail: Literal["brief", "full"] = "brief", n: int = 3) -> str:
        """F."""
        return ""

    schema = tool(strict=True)(f).schema()
    assert schema["function"]["strict"] is True
    params = schema["function"]["parameters"]
    assert params["required"] == ["shipment", "detail", "n"]
    assert params["additionalProperties"] is False
    assert params["properties"]["n"]["type"] == ["integer", "null"]
    assert {"type": "null"} in params["properties"]["detail"]["anyOf"]
    address = params["properties"]["shipment"]["properties"]["address"]
    assert address["required"] == ["city", "street", "zip_code"]
    assert address["additionalProperties"] is False
    assert "default" not in json.dumps(params)


def test_strict_mode_refuses_a_free_form_mapping() -> None:
    def f(counts: dict[str, int]) -> str:
        """F."""
        return ""

    with pytest.raises(ValueError, match="free-form mapping"):
        tool(strict=True)(f)


def test_context_parameters_are_absent_in_every_form() -> None:
    def f(
        run: RunContext,
        user: UserContext,
        maybe: UserContext | None,
        also: Optional[RunContext],  # noqa: UP045
        query: str,
    ) -> str:
        """F."""
        return query

    spec = function_schema(f)
    assert set(spec.parameters["properties"]) == {"query"}
    assert dict(spec.injected) == {"run": "run", "user": "user", "maybe": "user", "also": "run"}


def test_a_function_with_no_parameters_has_an_empty_object_schema() -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    assert _params(ping) == {"type": "object", "properties": {}, "additionalProperties": False}


def test_star_args_are_refused_with_a_clear_message() -> None:
    def f(*items: str) -> str:
        return ""

    with pytest.raises(TypeError, match="named parameters"):
        tool(f)


def test_non_ascii_or_lambda_names_need_an_explicit_name() -> None:
    def 查询() -> str:
        return ""

    with pytest.raises(ValueError, match="name="):
        tool(查询)
    assert tool(name="query")(查询).name == "query"


def test_a_nullable_model_stays_an_any_of() -> None:
    def f(address: Address | None = None) -> str:
        """F."""
        return ""

    prop = _params(f)["properties"]["address"]
    assert prop["anyOf"][1] == {"type": "null"}
    assert prop["anyOf"][0]["type"] == "object"
    strict = _params(f, strict=True)["properties"]["address"]
    assert strict["anyOf"][0]["additionalProperties"] is False
