"""The retail tools: pure functions over the database.

Every tool validates everything before it mutates anything, so a refused call leaves the
database exactly as it was. Records are shared with the cached base database until written
(see `Domain.copy_on_write`): a write tool first takes its own copy of each record it changes
with `_own`, never mutating a record in place otherwise.

Refusal messages carry the policy's reason keywords ("not pending", "not delivered",
"return window closed", "refund method not allowed", "already modified", "same product only",
"out of stock", "insufficient balance") so an agent that tries a forbidden write learns why.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from agentload.domains.base import Tool, ToolError, evaluate_arithmetic, own
from agentload.domains.retail.data import NOW, RETURN_WINDOW_DAYS

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
ADDRESS_FIELDS = ("address1", "address2", "city", "state", "country", "zip")


# --- helpers ---------------------------------------------------------------------------


def _money(x: float) -> float:
    return round(x + 0.0, 2)


def _user(db: dict, user_id: str) -> dict:
    user = db["users"].get(user_id.strip())
    if user is None:
        raise ToolError(f"user not found: {user_id!r}")
    return user


def _order(db: dict, order_id: str) -> dict:
    oid = order_id.strip().lstrip("#").upper()
    order = db["orders"].get(oid)
    if order is None:
        raise ToolError(f"order not found: {order_id!r}")
    return order


def _product(db: dict, product_id: str) -> dict:
    product = db["products"].get(product_id.strip())
    if product is None:
        raise ToolError(f"product not found: {product_id!r}")
    return product


def _variant(db: dict, item_id: str) -> tuple[dict, dict]:
    """(product, variant) of an item id anywhere in the catalogue."""
    for product in db["products"].values():
        v = product["variants"].get(item_id)
        if v is not None:
            return product, v
    raise ToolError(f"item not found in the catalogue: {item_id!r}")


def _require_status(order: dict, status: str) -> None:
    if order["status"] != status:
        word = "not pending" if status == "pending" else f"not {status}"
        raise ToolError(f"order {order['order_id']} is {word} (its status is {order['status']!r})")


def _payment_method(db: dict, order: dict, pm_id: str) -> dict:
    user = db["users"][order["user_id"]]
    pm = user["payment_methods"].get(pm_id.strip())
    if pm is None:
        raise ToolError(
            f"payment method {pm_id!r} does not belong to user {order['user_id']} "
            f"(their methods: {', '.join(sorted(user['payment_methods']))})"
        )
    return pm


def _check_balance(pm: dict, amount: float) -> None:
    if pm["source"] == "gift_card" and amount > 0 and pm["balance"] + 1e-9 < amount:
        raise ToolError(
            f"insufficient balance on gift card {pm['id']}: {pm['balance']:.2f} available, "
            f"{amount:.2f} needed"
        )


def _order_items(order: dict, item_ids: list[str]) -> list[dict]:
    if len(set(item_ids)) != len(item_ids):
        raise ToolError("item_ids lists an item more than once")
    by_id = {i["item_id"]: i for i in order["items"]}
    missing = [i for i in item_ids if i not in by_id]
    if missing:
        raise ToolError(f"items not in order {order['order_id']}: {', '.join(missing)}")
    return [by_id[i] for i in item_ids]


def _in_order_sequence(order: dict, item_ids: list[str]) -> list[str]:
    """`item_ids` in the order's own item order, so the stored request (and so the db hash)
    does not depend on the order in which an agent listed the items."""
    wanted = set(item_ids)
    return [i["item_id"] for i in order["items"] if i["item_id"] in wanted]


def _check_swaps(db: dict, order: dict, item_ids: list[str], new_item_ids: list[str]) -> float:
    """Validate an item-for-variant swap and return the price difference (new - old)."""
    if len(item_ids) != len(new_item_ids):
        raise ToolError("item_ids and new_item_ids must have the same length")
    old_items = _order_items(order, item_ids)
    in_order = {i["item_id"] for i in order["items"]}
    if len(set(new_item_ids)) != len(new_item_ids):
        raise ToolError("new_item_ids lists an item more than once")
    diff = 0.0
    for old, new_id in zip(old_items, new_item_ids, strict=True):
        product, variant = _variant(db, new_id)
        if product["product_id"] != old["product_id"]:
            raise ToolError(
                f"new item {new_id} ({product['name']}) is not a variant of the product of item "
                f"{old['item_id']}: same product only"
            )
        if new_id == old["item_id"]:
            raise ToolError(f"new item {new_id} is the same variant as the current one")
        if new_id in in_order:
            raise ToolError(f"item {new_id} is already in order {order['order_id']}")
        if variant["stock"] <= 0:
            raise ToolError(f"item {new_id} is out of stock")
        diff += variant["price"] - old["price"]
    return _money(diff)


def _delivered_within_window(order: dict) -> None:
    _require_status(order, "delivered")
    delivered = datetime.strptime(order["delivered_at"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=NOW.tzinfo
    )
    closes = delivered + timedelta(days=RETURN_WINDOW_DAYS)
    if closes < NOW:
        raise ToolError(
            f"the return window closed on {closes:%Y-%m-%d} ({RETURN_WINDOW_DAYS} days after "
            f"delivery on {delivered:%Y-%m-%d}): return window closed"
        )


def _net_paid(order: dict) -> dict[str, float]:
    """Amount each payment method has paid for the order, net of refunds, in history order."""
    net: dict[str, float] = {}
    for tx in order["payment_history"]:
        sign = 1 if tx["type"] == "payment" else -1
        net[tx["payment_method_id"]] = net.get(tx["payment_method_id"], 0.0) + sign * tx["amount"]
    return {k: _money(v) for k, v in net.items() if _money(v) > 0}


def _adjust_gift_card(db: dict, user_id: str, pm_id: str, delta: float) -> None:
    user = db["users"][user_id]
    if user["payment_methods"][pm_id]["source"] != "gift_card" or delta == 0:
        return
    user = own(db, "users", user_id)
    pm = user["payment_methods"][pm_id]
    pm["balance"] = _money(pm["balance"] + delta)


def _address(args: dict[str, str]) -> dict[str, str]:
    addr = {k: args[k].strip() for k in ADDRESS_FIELDS}
    empty = [k for k in ADDRESS_FIELDS if k != "address2" and not addr[k]]
    if empty:
        raise ToolError(f"address fields must not be empty: {', '.join(empty)}")
    return addr


def _order_view(db: dict, order: dict) -> dict:
    """An order with item names and options filled in from the catalogue."""
    out = dict(order)
    items = []
    for it in order["items"]:
        product = db["products"][it["product_id"]]
        variant = product["variants"][it["item_id"]]
        items.append({**it, "name": product["name"], "options": variant["options"]})
    out["items"] = items
    return out


# --- read tools ------------------------------------------------------------------------


def lookup_customer_by_email(db: dict, email: str) -> str:
    wanted = email.strip().lower()
    for uid, user in db["users"].items():
        if user["email"] == wanted:
            return uid
    raise ToolError(f"no user with email {email!r}")


def lookup_customer_by_name_and_zip(db: dict, first_name: str, last_name: str, zip: str) -> str:
    f, last, z = first_name.strip().lower(), last_name.strip().lower(), zip.strip()
    for uid, user in db["users"].items():
        n = user["name"]
        if (n["first_name"].lower(), n["last_name"].lower(), user["address"]["zip"]) == (
            f,
            last,
            z,
        ):
            return uid
    raise ToolError(f"no user named {first_name} {last_name} with zip code {zip!r}")


def get_customer_profile(db: dict, user_id: str) -> dict:
    return _user(db, user_id)


def get_order(db: dict, order_id: str) -> dict:
    return _order_view(db, _order(db, order_id))


def get_product(db: dict, product_id: str) -> dict:
    return _product(db, product_id)


def list_products(db: dict) -> dict[str, str]:
    return {
        p["name"]: pid for pid, p in sorted(db["products"].items(), key=lambda kv: kv[1]["name"])
    }


def calculate(db: dict, expression: str) -> str:
    value = evaluate_arithmetic(expression.replace("$", "").replace(",", ""))
    return f"{round(value, 2):.2f}"


def handoff_to_human(db: dict, summary: str) -> str:
    return "Transfer successful. A human agent will take over this conversation."


# --- write tools -----------------------------------------------------------------------


def cancel_order(db: dict, order_id: str, reason: str) -> dict:
    order = _order(db, order_id)
    _require_status(order, "pending")
    if reason not in CANCEL_REASONS:
        raise ToolError(f"reason must be one of {', '.join(CANCEL_REASONS)}")
    refunds = _net_paid(order)
    order = own(db, "orders", order["order_id"])
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    for pm_id, amount in refunds.items():
        order["payment_history"].append(
            {"type": "refund", "amount": amount, "payment_method_id": pm_id}
        )
        _adjust_gift_card(db, order["user_id"], pm_id, amount)
    return _order_view(db, order)


def change_order_address(db: dict, order_id: str, **address: str) -> dict:
    order = _order(db, order_id)
    _require_status(order, "pending")
    addr = _address(address)
    order = own(db, "orders", order["order_id"])
    order["address"] = addr
    return _order_view(db, order)


def change_order_payment(db: dict, order_id: str, payment_method_id: str) -> dict:
    order = _order(db, order_id)
    _require_status(order, "pending")
    pm = _payment_method(db, order, payment_method_id)
    if pm["id"] == order["payment_method_id"]:
        raise ToolError(f"order {order['order_id']} is already paid with {pm['id']}")
    total = _money(sum(i["price"] for i in order["items"]))
    _check_balance(pm, total)
    refunds = _net_paid(order)
    order = own(db, "orders", order["order_id"])
    order["payment_history"].append(
        {"type": "payment", "amount": total, "payment_method_id": pm["id"]}
    )
    _adjust_gift_card(db, order["user_id"], pm["id"], -total)
    for old_pm, amount in refunds.items():
        order["payment_history"].append(
            {"type": "refund", "amount": amount, "payment_method_id": old_pm}
        )
        _adjust_gift_card(db, order["user_id"], old_pm, amount)
    order["payment_method_id"] = pm["id"]
    return _order_view(db, order)


def change_order_items(
    db: dict, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> dict:
    order = _order(db, order_id)
    _require_status(order, "pending")
    if order.get("items_modified"):
        raise ToolError(
            f"the items of order {order['order_id']} were already modified once: already modified"
        )
    diff = _check_swaps(db, order, item_ids, new_item_ids)
    pm = _payment_method(db, order, payment_method_id)
    _check_balance(pm, diff)
    order = own(db, "orders", order["order_id"])
    swap = dict(zip(item_ids, new_item_ids, strict=True))
    for it in order["items"]:
        new_id = swap.get(it["item_id"])
        if new_id is not None:
            it["item_id"] = new_id
            it["price"] = db["products"][it["product_id"]]["variants"][new_id]["price"]
    order["items_modified"] = True
    if diff != 0:
        order["payment_history"].append(
            {
                "type": "payment" if diff > 0 else "refund",
                "amount": abs(diff),
                "payment_method_id": pm["id"],
            }
        )
        _adjust_gift_card(db, order["user_id"], pm["id"], -diff)
    return _order_view(db, order)


def change_default_address(db: dict, user_id: str, **address: str) -> dict:
    user = _user(db, user_id)
    addr = _address(address)
    user = own(db, "users", user["user_id"])
    user["address"] = addr
    return user


def request_return(db: dict, order_id: str, item_ids: list[str], payment_method_id: str) -> dict:
    order = _order(db, order_id)
    _delivered_within_window(order)
    items = _order_items(order, item_ids)
    pm = _payment_method(db, order, payment_method_id)
    if pm["id"] != order["payment_method_id"] and pm["source"] != "gift_card":
        raise ToolError(
            f"refund method not allowed: a refund goes to the order's original payment method "
            f"({order['payment_method_id']}) or to the customer's gift card"
        )
    order = own(db, "orders", order["order_id"])
    order["status"] = "return requested"
    order["return_request"] = {
        "item_ids": _in_order_sequence(order, item_ids),
        "payment_method_id": pm["id"],
        "refund_amount": _money(sum(i["price"] for i in items)),
    }
    return _order_view(db, order)


def request_exchange(
    db: dict, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> dict:
    order = _order(db, order_id)
    _delivered_within_window(order)
    diff = _check_swaps(db, order, item_ids, new_item_ids)
    pm = _payment_method(db, order, payment_method_id)
    _check_balance(pm, diff)
    swap = dict(zip(item_ids, new_item_ids, strict=True))
    pairs = [(old, swap[old]) for old in _in_order_sequence(order, item_ids)]
    order = own(db, "orders", order["order_id"])
    order["status"] = "exchange requested"
    order["exchange_request"] = {
        "item_ids": [old for old, _ in pairs],
        "new_item_ids": [new for _, new in pairs],
        "payment_method_id": pm["id"],
        "price_difference": diff,
    }
    return _order_view(db, order)


# --- schemas ---------------------------------------------------------------------------


def _obj(props: dict[str, dict], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": False,
    }


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


_ORDER_ID = _s("The order id, such as 'R4829301'.", minLength=1)
_USER_ID = _s("The user id, such as 'ava_chen_1234'.", minLength=1)
_PM_ID = _s(
    "A payment method id from the user's details, such as 'gift_card_1234567'.", minLength=1
)
_ITEM_IDS = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "minItems": 1,
    "description": "Item ids of the order to act on, each listed once.",
}
_NEW_ITEM_IDS = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "minItems": 1,
    "description": "The new item ids, position by position: new_item_ids[i] replaces "
    "item_ids[i] and must be another in-stock variant of the same product.",
}
_ADDRESS_PROPS = {
    "address1": _s("Street address, such as '1200 Maple Avenue'.", minLength=1),
    "address2": _s("Apartment, suite or unit; an empty string if none."),
    "city": _s("City.", minLength=1),
    "state": _s("State as a two-letter code, such as 'OR'.", minLength=1),
    "country": _s("Country, such as 'USA'.", minLength=1),
    "zip": _s("Zip code, such as '97201'.", minLength=1),
}

TOOLS: list[Tool] = [
    Tool(
        "lookup_customer_by_email",
        "Find a user's id from their email address. Use it to authenticate the user.",
        _obj({"email": _s("The user's email, such as 'ava.chen12@example.com'.", minLength=1)}),
        False,
        lookup_customer_by_email,
    ),
    Tool(
        "lookup_customer_by_name_and_zip",
        "Find a user's id from their first name, last name and the zip code of their default "
        "address. Use it to authenticate a user who cannot give their email.",
        _obj(
            {
                "first_name": _s("First name, such as 'Ava'.", minLength=1),
                "last_name": _s("Last name, such as 'Chen'.", minLength=1),
                "zip": _s("Zip code of the default address, such as '97201'.", minLength=1),
            }
        ),
        False,
        lookup_customer_by_name_and_zip,
    ),
    Tool(
        "get_customer_profile",
        "Get a user's profile: name, email, default address, payment methods (with gift card "
        "balances) and the ids of their orders.",
        _obj({"user_id": _USER_ID}),
        False,
        get_customer_profile,
    ),
    Tool(
        "get_order",
        "Get an order: status, creation and delivery dates, shipping address, items (item id, "
        "product, options, price), fulfillments with tracking ids, payment method and payment "
        "history, and any cancellation, return or exchange request.",
        _obj({"order_id": _ORDER_ID}),
        False,
        get_order,
    ),
    Tool(
        "get_product",
        "Get a product type and all its variants: item id, options, price and units in stock.",
        _obj({"product_id": _s("The product id, a 10-digit string.", minLength=1)}),
        False,
        get_product,
    ),
    Tool(
        "list_products",
        "List every product type sold, as a map from product name to product id.",
        _obj({}),
        False,
        list_products,
    ),
    Tool(
        "calculate",
        "Evaluate an arithmetic expression (numbers, + - * / and parentheses); the result is "
        "rounded to 2 decimals.",
        _obj({"expression": _s("The expression, such as '(54.21 + 12.03) * 2'.", minLength=1)}),
        False,
        calculate,
    ),
    Tool(
        "cancel_order",
        "Cancel a pending order. Each payment is refunded to the method that made it; gift card "
        "refunds are immediate. Only after the user has confirmed with 'yes'.",
        _obj(
            {
                "order_id": _ORDER_ID,
                "reason": _s("Why the user cancels.", enum=list(CANCEL_REASONS)),
            }
        ),
        True,
        cancel_order,
    ),
    Tool(
        "change_order_address",
        "Change the shipping address of a pending order. Only after the user has confirmed "
        "with 'yes'.",
        _obj({"order_id": _ORDER_ID, **_ADDRESS_PROPS}),
        True,
        change_order_address,
    ),
    Tool(
        "change_order_payment",
        "Pay a pending order with another of the user's payment methods: the order total is "
        "charged to the new method and what was paid is refunded to the old one. A gift card "
        "must hold the whole total. Only after the user has confirmed with 'yes'.",
        _obj({"order_id": _ORDER_ID, "payment_method_id": _PM_ID}),
        True,
        change_order_payment,
    ),
    Tool(
        "change_order_items",
        "Swap items of a pending order for other variants of the same products. Allowed once "
        "per order, so include every item to change in one call. The price difference is "
        "charged to (or refunded to) the given payment method; a gift card must cover a "
        "positive difference. Only after the user has confirmed with 'yes'.",
        _obj(
            {
                "order_id": _ORDER_ID,
                "item_ids": _ITEM_IDS,
                "new_item_ids": _NEW_ITEM_IDS,
                "payment_method_id": _PM_ID,
            }
        ),
        True,
        change_order_items,
    ),
    Tool(
        "change_default_address",
        "Change a user's default address (existing orders keep theirs). Only after the user "
        "has confirmed with 'yes'.",
        _obj({"user_id": _USER_ID, **_ADDRESS_PROPS}),
        True,
        change_default_address,
    ),
    Tool(
        "request_return",
        "Request the return of items of a delivered order, within the return window. The "
        "refund goes to the order's original payment method or to the user's gift card. The "
        "order becomes 'return requested'. Only after the user has confirmed with 'yes'.",
        _obj({"order_id": _ORDER_ID, "item_ids": _ITEM_IDS, "payment_method_id": _PM_ID}),
        True,
        request_return,
    ),
    Tool(
        "request_exchange",
        "Request the exchange of items of a delivered order, within the return window, for "
        "other in-stock variants of the same products. The price difference is settled with "
        "the given payment method; a gift card must cover a positive difference. The order "
        "becomes 'exchange requested'. Only after the user has confirmed with 'yes'.",
        _obj(
            {
                "order_id": _ORDER_ID,
                "item_ids": _ITEM_IDS,
                "new_item_ids": _NEW_ITEM_IDS,
                "payment_method_id": _PM_ID,
            }
        ),
        True,
        request_exchange,
    ),
    Tool(
        "handoff_to_human",
        "Hand the conversation to a human agent, with a short summary of the user's issue. "
        "Use it only when the policy says so; it ends your part of the conversation.",
        _obj({"summary": _s("What the user needs and what was done so far.", minLength=1)}),
        False,
        handoff_to_human,
    ),
]

TRANSFER_TOOL = "handoff_to_human"
