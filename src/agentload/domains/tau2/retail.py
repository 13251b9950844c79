"""τ²-bench's retail domain: an online store's customer service agent, its tools over the
products, users and orders of the store, and its policy.

The tools behave as τ²-bench's (sierra-research/tau2-bench, `domains/retail`): the same
names, schemas, checks and error texts, the same changes to the database (so the same hash),
and the same JSON answers. The database is a plain dict in the shape τ²'s `RetailDB` dumps to.
Where τ²'s code has a quirk that changes the state (the item-modification price, refunds
applied before a later lookup fails), it is kept, since grading compares database hashes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentload.domains.tau2.toolkit import (
    Record,
    ToolError,
    ToolKit,
    World,
    calculate,
    load_json_db,
    read_policy,
    tool,
)

__all__ = [
    "AGENT_KIT",
    "USER_KIT",
    "RetailTools",
    "make_world",
    "policy",
    "string_fields",
]


# --- the schemas the agent sees (τ²'s, text for text) ----------------------------------------


def _params(*props: tuple[str, str, bool]) -> dict[str, Any]:
    """A tool's parameters object as τ²'s schema writes it: every parameter required, each a
    string or (flag set) an array of strings, titled from its name."""
    properties: dict[str, Any] = {}
    for name, description, is_list in props:
        prop: dict[str, Any] = {"description": description}
        if is_list:
            prop["items"] = {"type": "string"}
        prop["title"] = name.replace("_", " ").title()
        prop["type"] = "array" if is_list else "string"
        properties[name] = prop
    out: dict[str, Any] = {"properties": properties}
    if props:
        out["required"] = [p[0] for p in props]
    out["title"] = "parameters"
    out["type"] = "object"
    return out


_ORDER_ID = (
    "order_id",
    "The order id, such as '#W0000000'. Be careful there is a '#' symbol at the beginning of "
    "the order id.",
    False,
)
_USER_ID = ("user_id", "The user id, such as 'sara_doe_496'.", False)
_PAYMENT_ID = (
    "payment_method_id",
    "The payment method id to pay or receive refund for the item price difference, such as "
    "'gift_card_0000000' or 'credit_card_0000000'. These can be looked up from the user or "
    "order details.",
    False,
)
_ADDRESS = (
    ("address1", "The first line of the address, such as '123 Main St'.", False),
    ("address2", "The second line of the address, such as 'Apt 1' or ''.", False),
    ("city", "The city, such as 'San Francisco'.", False),
    ("state", "The state, such as 'CA'.", False),
    ("country", "The country, such as 'USA'.", False),
    ("zip", "The zip code, such as '12345'.", False),
)
_CONFIRM = (
    "The agent needs to explain the modification detail and ask for explicit user "
    "confirmation (yes/no) to proceed."
)

_CALCULATE = _params(
    (
        "expression",
        "The mathematical expression to calculate, such as '2 + 2'. The expression can contain "
        "numbers, operators (+, -, *, /), parentheses, and spaces.",
        False,
    )
)
_CANCEL = _params(
    _ORDER_ID,
    (
        "reason",
        "The reason for cancellation, which should be either 'no longer needed' or 'ordered "
        "by mistake'.",
        False,
    ),
)
_EXCHANGE = _params(
    _ORDER_ID,
    (
        "item_ids",
        "The item ids to be exchanged, each such as '1008292230'. There could be duplicate "
        "items in the list.",
        True,
    ),
    (
        "new_item_ids",
        "The item ids to be exchanged for, each such as '1008292230'.\nThere could be "
        "duplicate items in the list. Each new item id should match the item id\nin the same "
        "position and be of the same product.",
        True,
    ),
    (
        "payment_method_id",
        "The payment method id to pay or receive refund for the item price difference,\nsuch "
        "as 'gift_card_0000000' or 'credit_card_0000000'. These can be looked up\nfrom the "
        "user or order details.",
        False,
    ),
)
_FIND_BY_NAME = _params(
    ("first_name", "The first name of the customer, such as 'John'.", False),
    ("last_name", "The last name of the customer, such as 'Doe'.", False),
    ("zip", "The zip code of the customer, such as '12345'.", False),
)
_FIND_BY_EMAIL = _params(
    ("email", "The email of the user, such as 'something@example.com'.", False)
)
_ORDER = _params(_ORDER_ID)
_PRODUCT = _params(
    (
        "product_id",
        "The product id, such as '6086499569'. Be careful the product id is different from "
        "the item id.",
        False,
    )
)
_ITEM = _params(
    (
        "item_id",
        "The item id, such as '6086499569'. Be careful the item id is different from the "
        "product id.",
        False,
    )
)
_USER = _params(_USER_ID)
_NO_PARAMS = _params()
_ORDER_ADDRESS = _params(_ORDER_ID, *_ADDRESS)
_MODIFY_ITEMS = _params(
    _ORDER_ID,
    (
        "item_ids",
        "The item ids to be modified, each such as '1008292230'. There could be duplicate "
        "items in the list.",
        True,
    ),
    (
        "new_item_ids",
        "The item ids to be modified for, each such as '1008292230'. There could be duplicate "
        "items in the list. Each new item id should match the item id in the same position "
        "and be of the same product.",
        True,
    ),
    _PAYMENT_ID,
)
_MODIFY_PAYMENT = _params(_ORDER_ID, _PAYMENT_ID)
_USER_ADDRESS = _params(_USER_ID, *_ADDRESS)
_RETURN = _params(
    _ORDER_ID,
    (
        "item_ids",
        "The item ids to be returned, each such as '1008292230'. There could be duplicate "
        "items in the list.",
        True,
    ),
    (
        "payment_method_id",
        "The payment method id to pay or receive refund for the item price difference, such "
        "as 'gift_card_0000000' or 'credit_card_0000000'.\nThese can be looked up from the "
        "user or order details.",
        False,
    ),
)
_TRANSFER = _params(("summary", "A summary of the user's issue.", False))

TRANSFER_DESCRIPTION = (
    "Transfer the user to a human agent, with a summary of the user's issue.\n\n"
    "Only transfer if\n"
    " -  the user explicitly asks for a human agent\n"
    " -  given the policy and the available tools, you cannot solve the user's issue."
)
"""τ²'s description of transfer_to_human_agents (the mock domain offers the same tool)."""


# --- checks that τ² gets from building its pydantic models -----------------------------------

# τ² builds an address, task or notification model from the agent's raw arguments; a value
# that is not a string fails that model's validation, with pydantic's message (pydantic 2.14,
# the version τ² 1.0.1 runs with, whose docs link carries its minor version).
_PYDANTIC_DOCS = "https://errors.pydantic.dev/2.14/v/string_type"


def _input_repr(value: Any) -> str:
    text = repr(value)
    # pydantic shortens long input values to their first 25 and last 24 characters.
    return text if len(text) <= 50 else f"{text[:25]}...{text[-24:]}"


def string_fields(model: str, fields: Iterable[tuple[str, Any, bool]]) -> None:
    """Raise pydantic's validation error, as τ² shows it, when a field that must be a string
    (or None, where the flag allows it) is not. `fields` in the model's field order."""
    bad = [
        (name, value)
        for name, value, nullable in fields
        if not isinstance(value, str) and not (nullable and value is None)
    ]
    if not bad:
        return
    lines = [f"{len(bad)} validation error{'s' if len(bad) > 1 else ''} for {model}"]
    for name, value in bad:
        lines.append(name)
        lines.append(
            "  Input should be a valid string [type=string_type, "
            f"input_value={_input_repr(value)}, input_type={type(value).__name__}]"
        )
        lines.append(f"    For further information visit {_PYDANTIC_DOCS}")
    raise ToolError("\n".join(lines))


def _address(
    address1: Any, address2: Any, city: Any, state: Any, country: Any, zip: Any
) -> dict[str, Any]:
    """A new address in τ²'s UserAddress field order (not the tools' argument order)."""
    string_fields(
        "UserAddress",
        (
            ("address1", address1, False),
            ("address2", address2, False),
            ("city", city, False),
            ("country", country, False),
            ("state", state, False),
            ("zip", zip, False),
        ),
    )
    return {
        "address1": address1,
        "address2": address2,
        "city": city,
        "country": country,
        "state": state,
        "zip": zip,
    }


# --- the tools -----------------------------------------------------------------------------------


def _count_check(item_ids: Any, order: dict[str, Any], message: str | None) -> None:
    """Every id asked for (with repeats) is in the order as many times; τ² words the error
    per tool (None: the id itself followed by "not found")."""
    in_order = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > in_order.count(item_id):
            raise ToolError(message.format(item_id) if message else f"{item_id} not found")


def _first_item(order: dict[str, Any], item_id: Any) -> dict[str, Any]:
    for item in order["items"]:
        if item["item_id"] == item_id:
            return item
    raise ToolError(f"Item {item_id} not found")


def _scan(table: dict[str, Any]) -> Iterable[tuple[str, Any]]:
    """A table's (id, record) pairs for reading only. The plain dict view: a copy-on-write
    table (toolkit.CowTable) would take a private copy of every record it yields, which a
    search through all users or products does not need."""
    return dict.items(table)


def _is_gift_card(method: dict[str, Any]) -> bool:
    return method["source"] == "gift_card"


class RetailTools(ToolKit):
    """The retail agent's tools over the store database (τ²'s RetailTools)."""

    # -- lookups (τ²'s private helpers; their errors are what the agent reads) --

    def _order(self, order_id: Any) -> dict[str, Any]:
        orders = self.db["orders"]
        if order_id not in orders:
            raise ToolError("Order not found")
        return orders[order_id]

    def _user(self, user_id: Any) -> dict[str, Any]:
        users = self.db["users"]
        if user_id not in users:
            raise ToolError("User not found")
        return users[user_id]

    def _product(self, product_id: Any) -> dict[str, Any]:
        products = self.db["products"]
        if product_id not in products:
            raise ToolError("Product not found")
        return products[product_id]

    def _variant(self, product_id: Any, variant_id: Any) -> dict[str, Any]:
        variants = self._product(product_id)["variants"]
        if variant_id not in variants:
            raise ToolError("Variant not found")
        return variants[variant_id]

    def _payment_method(self, user_id: Any, payment_method_id: Any) -> dict[str, Any]:
        methods = self._user(user_id)["payment_methods"]
        if payment_method_id not in methods:
            raise ToolError("Payment method not found")
        return methods[payment_method_id]

    # -- tools, in τ²'s order --

    @tool(
        "generic",
        description="Calculate the result of a mathematical expression.",
        parameters=_CALCULATE,
    )
    def calculate(self, expression: str) -> str:
        return calculate(expression)

    @tool(
        "write",
        description=(
            "Cancel a pending order. If the order is already processed or delivered,\n\n"
            "it cannot be cancelled. The agent needs to explain the cancellation detail\n"
            "and ask for explicit user confirmation (yes/no) to proceed. If the user "
            "confirms,\nthe order status will be changed to 'cancelled' and the payment will "
            "be refunded.\nThe refund will be added to the user's gift card balance "
            "immediately if the payment\nwas made using a gift card, otherwise the refund "
            "would take 5-7 business days to process.\nThe function returns the order details "
            "after the cancellation."
        ),
        parameters=_CANCEL,
    )
    def cancel_pending_order(self, order_id: str, reason: str) -> Record:
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError("Non-pending order cannot be cancelled")
        if reason not in {"no longer needed", "ordered by mistake"}:
            raise ToolError("Invalid reason")
        refunds = []
        for payment in order["payment_history"]:
            method_id = payment["payment_method_id"]
            refunds.append(
                {
                    "transaction_type": "refund",
                    "amount": payment["amount"],
                    "payment_method_id": method_id,
                }
            )
            # Gift cards are refunded as the loop goes: a later failed lookup leaves them so.
            method = self._payment_method(self._user(order["user_id"])["user_id"], method_id)
            if _is_gift_card(method):
                method["balance"] = round(method["balance"] + payment["amount"], 2)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend(refunds)
        return Record(order)

    @tool(
        "write",
        description=(
            "Exchange items in a delivered order to new items of the same product type.\n\n"
            "For a delivered order, return or exchange can be only done once by the agent.\n"
            "The agent needs to explain the exchange detail and ask for explicit user "
            "confirmation (yes/no) to proceed."
        ),
        parameters=_EXCHANGE,
    )
    def exchange_delivered_order_items(
        self,
        order_id: str,
        item_ids: list[str],
        new_item_ids: list[str],
        payment_method_id: str,
    ) -> Record:
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError("Non-delivered order cannot be exchanged")
        _count_check(item_ids, order, "Number of {} not found.")
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match.")
        diff: float = 0
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
            item = _first_item(order, item_id)
            variant = self._variant(item["product_id"], new_item_id)
            if not variant["available"]:
                raise ToolError(f"New item {new_item_id} not found or available")
            diff += variant["price"] - item["price"]
        diff = round(diff, 2)
        method = self._payment_method(order["user_id"], payment_method_id)
        if _is_gift_card(method) and method["balance"] < diff:
            raise ToolError("Insufficient gift card balance to pay for the price difference")
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        order["exchange_price_difference"] = diff
        return Record(order)

    @tool(
        "read",
        description=(
            "Find user id by first name, last name, and zip code. If the user is not found, "
            "the function\n\nwill return an error message. By default, find user id by email, "
            "and only call this function\nif the user is not found by email or cannot remember "
            "email."
        ),
        parameters=_FIND_BY_NAME,
    )
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        for user_id, user in _scan(self.db["users"]):
            name = user["name"]
            if (
                name["first_name"].lower() == first_name.lower()
                and name["last_name"].lower() == last_name.lower()
                and user["address"]["zip"] == zip
            ):
                return user_id
        raise ToolError("User not found")

    @tool(
        "read",
        description=(
            "Find user id by email. If the user is not found, the function will return an "
            "error message."
        ),
        parameters=_FIND_BY_EMAIL,
    )
    def find_user_id_by_email(self, email: str) -> str:
        for user_id, user in _scan(self.db["users"]):
            if user["email"].lower() == email.lower():
                return user_id
        raise ToolError("User not found")

    @tool("read", description="Get the status and details of an order.", parameters=_ORDER)
    def get_order_details(self, order_id: str) -> Record:
        return Record(self._order(order_id))

    @tool("read", description="Get the inventory details of a product.", parameters=_PRODUCT)
    def get_product_details(self, product_id: str) -> Record:
        return Record(self._product(product_id))

    @tool("read", description="Get the inventory details of an item.", parameters=_ITEM)
    def get_item_details(self, item_id: str) -> Record:
        for _, product in _scan(self.db["products"]):
            if item_id in product["variants"]:
                return Record(product["variants"][item_id])
        raise ToolError("Item not found")

    @tool(
        "read",
        description="Get the details of a user, including their orders.",
        parameters=_USER,
    )
    def get_user_details(self, user_id: str) -> Record:
        return Record(self._user(user_id))

    @tool(
        "read",
        description=(
            "List the name and product id of all product types.\n\nEach product type has a "
            "variety of different items with unique item ids and options.\nThere are only 50 "
            "product types in the store."
        ),
        parameters=_NO_PARAMS,
    )
    def list_all_product_types(self) -> str:
        names = {p["name"]: p["product_id"] for _, p in _scan(self.db["products"])}
        return json.dumps(names, sort_keys=True)

    @tool(
        "write",
        description=f"Modify the shipping address of a pending order. {_CONFIRM}",
        parameters=_ORDER_ADDRESS,
    )
    def modify_pending_order_address(
        self,
        order_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> Record:
        order = self._order(order_id)
        # Any "pending..." status passes here (τ²'s loose check), unlike items and cancel.
        if "pending" not in order["status"]:
            raise ToolError("Non-pending order cannot be modified")
        order["address"] = _address(address1, address2, city, state, country, zip)
        return Record(order)

    @tool(
        "write",
        description=(
            "Modify items in a pending order to new items of the same product type. For a "
            "pending order, this function can only be called once. The agent needs to explain "
            "the exchange detail and ask for explicit user confirmation (yes/no) to proceed."
        ),
        parameters=_MODIFY_ITEMS,
    )
    def modify_pending_order_items(
        self,
        order_id: str,
        item_ids: list[str],
        new_item_ids: list[str],
        payment_method_id: str,
    ) -> Record:
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError("Non-pending order cannot be modified")
        _count_check(item_ids, order, None)
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match")
        diff: float = 0
        variant: dict[str, Any] | None = None
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
            if item_id == new_item_id:
                raise ToolError("The new item id should be different from the old item id")
            item = _first_item(order, item_id)
            variant = self._variant(item["product_id"], new_item_id)
            if not variant["available"]:
                raise ToolError(f"New item {new_item_id} not found or available")
            diff += variant["price"] - item["price"]
        method = self._payment_method(order["user_id"], payment_method_id)
        if _is_gift_card(method) and method["balance"] < diff:
            raise ToolError("Insufficient gift card balance to pay for the new item")
        order["payment_history"].append(
            {
                "transaction_type": "payment" if diff > 0 else "refund",
                "amount": float(abs(diff)),  # τ²'s payment model makes it a float
                "payment_method_id": payment_method_id,
            }
        )
        if _is_gift_card(method):
            method["balance"] = round(method["balance"] - diff, 2)
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
            item = _first_item(order, item_id)
            item["item_id"] = new_item_id
            # τ² gives every changed item the price and options of the LAST new variant
            # checked above; kept, since the graded database hash depends on it.
            assert variant is not None
            item["price"] = variant["price"]
            item["options"] = variant["options"]
        order["status"] = "pending (item modified)"
        return Record(order)

    @tool(
        "write",
        description=f"Modify the payment method of a pending order. {_CONFIRM}",
        parameters=_MODIFY_PAYMENT,
    )
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> Record:
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ToolError("Non-pending order cannot be modified")
        method = self._payment_method(order["user_id"], payment_method_id)
        history = order["payment_history"]
        if len(history) != 1 or history[0]["transaction_type"] != "payment":
            raise ToolError("There should be exactly one payment for a pending order")
        old_id = history[0]["payment_method_id"]
        if old_id == payment_method_id:
            raise ToolError("The new payment method should be different from the current one")
        amount = history[0]["amount"]
        if _is_gift_card(method) and method["balance"] < amount:
            raise ToolError("Insufficient gift card balance to pay for the order")
        history.extend(
            [
                {
                    "transaction_type": "payment",
                    "amount": amount,
                    "payment_method_id": payment_method_id,
                },
                {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
            ]
        )
        if _is_gift_card(method):
            method["balance"] = round(method["balance"] - amount, 2)
        old_method = self._payment_method(order["user_id"], old_id)
        if _is_gift_card(old_method):
            old_method["balance"] = round(old_method["balance"] + amount, 2)
        return Record(order)

    @tool(
        "write",
        description=f"Modify the default address of a user. {_CONFIRM}",
        parameters=_USER_ADDRESS,
    )
    def modify_user_address(
        self,
        user_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> Record:
        user = self._user(user_id)
        user["address"] = _address(address1, address2, city, state, country, zip)
        return Record(user)

    @tool(
        "write",
        description=(
            "Return some items of a delivered order.\n\nThe order status will be changed to "
            "'return requested'.\nThe agent needs to explain the return detail and ask for "
            "explicit user confirmation (yes/no) to proceed.\nThe user will receive follow-up "
            "email for how and where to return the item."
        ),
        parameters=_RETURN,
    )
    def return_delivered_order_items(
        self, order_id: str, item_ids: list[str], payment_method_id: str
    ) -> Record:
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError("Non-delivered order cannot be returned")
        method = self._payment_method(self._user(order["user_id"])["user_id"], payment_method_id)
        if (
            not _is_gift_card(method)
            and payment_method_id != order["payment_history"][0]["payment_method_id"]
        ):
            raise ToolError("Payment method should be the original payment method")
        _count_check(item_ids, order, "Some item not found")
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return Record(order)

    @tool("generic", description=TRANSFER_DESCRIPTION, parameters=_TRANSFER)
    def transfer_to_human_agents(self, summary: str) -> str:
        return "Transfer successful"

    # -- the database shape --

    def normalize(self, db: dict[str, Any]) -> dict[str, Any]:
        return normalize_db(db)


# --- the database in RetailDB's dump shape ----------------------------------------------------


def _norm_address(a: dict[str, Any]) -> dict[str, Any]:
    return {k: a[k] for k in ("address1", "address2", "city", "country", "state", "zip")}


def _norm_payment_method(m: dict[str, Any]) -> dict[str, Any]:
    source = m["source"]
    if source == "credit_card":
        return {
            "source": source,
            "id": m["id"],
            "brand": m["brand"],
            "last_four": m["last_four"],
        }
    if source == "gift_card":
        return {"source": source, "id": m["id"], "balance": float(m["balance"])}
    if source == "paypal":
        return {"source": source, "id": m["id"]}
    raise ValueError(f"unknown payment method source {source!r}")


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _opt_list(v: Any) -> list[Any] | None:
    return None if v is None else list(v)


def _norm_order(o: dict[str, Any]) -> dict[str, Any]:
    return {
        "order_id": o["order_id"],
        "user_id": o["user_id"],
        "address": _norm_address(o["address"]),
        "items": [
            {
                "name": i["name"],
                "product_id": i["product_id"],
                "item_id": i["item_id"],
                "price": float(i["price"]),
                "options": dict(i["options"]),
            }
            for i in o["items"]
        ],
        "status": o["status"],
        "fulfillments": [
            {"tracking_id": list(f["tracking_id"]), "item_ids": list(f["item_ids"])}
            for f in o["fulfillments"]
        ],
        "payment_history": [
            {
                "transaction_type": p["transaction_type"],
                "amount": float(p["amount"]),
                "payment_method_id": p["payment_method_id"],
            }
            for p in o["payment_history"]
        ],
        "cancel_reason": o.get("cancel_reason"),
        "exchange_items": _opt_list(o.get("exchange_items")),
        "exchange_new_items": _opt_list(o.get("exchange_new_items")),
        "exchange_payment_method_id": o.get("exchange_payment_method_id"),
        "exchange_price_difference": _opt_float(o.get("exchange_price_difference")),
        "return_items": _opt_list(o.get("return_items")),
        "return_payment_method_id": o.get("return_payment_method_id"),
    }


def normalize_db(db: dict[str, Any]) -> dict[str, Any]:
    """The store database as τ²'s RetailDB dumps it: model field order, optional order
    fields filled with None, prices, amounts and balances as floats, unknown keys dropped."""
    extra = set(db) - {"products", "users", "orders"}
    if extra:  # τ²'s database model forbids other top-level keys
        raise ValueError(f"unexpected keys in the retail database: {sorted(extra)}")
    return {
        "products": {
            pid: {
                "name": p["name"],
                "product_id": p["product_id"],
                "variants": {
                    vid: {
                        "item_id": v["item_id"],
                        "options": dict(v["options"]),
                        "available": v["available"],
                        "price": float(v["price"]),
                    }
                    for vid, v in p["variants"].items()
                },
            }
            for pid, p in db["products"].items()
        },
        "users": {
            uid: {
                "user_id": u["user_id"],
                "name": {
                    "first_name": u["name"]["first_name"],
                    "last_name": u["name"]["last_name"],
                },
                "address": _norm_address(u["address"]),
                "email": u["email"],
                "payment_methods": {
                    mid: _norm_payment_method(m) for mid, m in u["payment_methods"].items()
                },
                "orders": list(u["orders"]),
            }
            for uid, u in db["users"].items()
        },
        "orders": {oid: _norm_order(o) for oid, o in db["orders"].items()},
    }


# --- what the domain exports --------------------------------------------------------------------

AGENT_KIT: type[ToolKit] = RetailTools
USER_KIT: type[ToolKit] | None = None


def make_world(domain_dir: Path) -> World:
    """A fresh store for one episode, from the domain folder's db.json."""
    return World(RetailTools(load_json_db(Path(domain_dir) / "db.json", normalize_db)))


policy = read_policy  # policy.md as it stands
