"""Retail tasks, generated from templates against the seed-0 database.

Each template picks a user (never the same user twice) and the orders, items and payment
methods it needs from the generated database, and derives everything else from it: gold
actions (reads, then the writes a correct agent performs), required outputs (facts read from
the database, or the policy's reason keyword for a refusal). `build_tasks` then checks every
task against the tools themselves: gold writes must succeed and change the database, and the
forbidden write of a refusal must be refused by the tool (where the tool can tell).

Task ids are stable for a given `data_version`: templates are consumed round-robin in a
fixed order from one seeded generator, so editing a template changes later tasks and must
come with a new `RetailDomain.data_version`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agentload.domains.base import Action, Task, ToolError, UserScenario, hash_db
from agentload.domains.retail import data
from agentload.domains.retail.tools import TOOLS

DOMAIN = "retail"
TASK_SEED = "agentload-retail-tasks-1"
_TOOL_FNS = {t.name: t.fn for t in TOOLS}
_WRITES = {t.name for t in TOOLS if t.writes}

PERSONAS = [
    "Friendly and chatty; answers questions fully and thanks the agent often.",
    "Busy and terse; gives one fact at a time and only what is asked.",
    "Polite but a little anxious; double-checks amounts before agreeing.",
    "Direct and businesslike; wants the matter settled quickly.",
    "Easy-going; writes casually, in lower case, with the odd typo.",
    "Careful and precise; reads back ids and numbers to make sure they are right.",
    "Slightly impatient; dislikes repeating themselves but cooperates.",
    "Warm and talkative; mentions why they are asking, but stays on topic.",
]

_CONFIRM = (
    " When the agent describes the change and asks you to confirm, check it matches what you "
    "want and reply 'yes'."
)
_ACCEPT_REFUSAL = (
    " If the agent says this is not possible, accept the explanation, do not ask for any "
    "alternative, and end the conversation."
)


@dataclass
class _Draft:
    category: str
    instructions: str
    known: dict[str, str]
    unknown: list[str]
    opening: str
    gold: list[Action]
    required: tuple[str, ...] = ()
    refusal: str | None = None
    # The write a careless agent would make in a refusal task; the tool must reject it.
    forbidden: Action | None = None
    extra_flags: set[str] = field(default_factory=set)


def _parse(ts: str) -> datetime:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=data.NOW.tzinfo)


def _money(x: float) -> str:
    return f"{x:.2f}"


def _clean_amount(x: float) -> bool:
    # "54.20" could be said as "$54.2"; keep required amounts whose cents end in 1-9.
    s = _money(x)
    return s[-1] != "0"


def _opts(options: dict[str, str]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in options.items())


def _addr_text(a: dict[str, str]) -> str:
    street = a["address1"] + (f", {a['address2']}" if a["address2"] else "")
    return f"{street}, {a['city']}, {a['state']} {a['zip']}, {a['country']}"


class _Gen:
    def __init__(self, db: dict) -> None:
        self.db = db
        self.rng = random.Random(TASK_SEED)
        self.used_users: set[str] = set()
        self.user_ids = sorted(db["users"])

    # --- lookups ---

    def item_desc(self, item_id: str, product_id: str) -> str:
        p = self.db["products"][product_id]
        return f"{p['name']} ({_opts(p['variants'][item_id]['options'])})"

    def pm_desc(self, pm: dict) -> str:
        if pm["source"] == "credit_card":
            brand = {"visa": "Visa", "mastercard": "Mastercard", "amex": "Amex"}[pm["brand"]]
            return f"your {brand} credit card ending in {pm['last_four']}"
        if pm["source"] == "gift_card":
            return "your gift card"
        return "your PayPal account"

    def orders(self, user: dict, *statuses: str) -> list[dict]:
        out = [self.db["orders"][o] for o in user["orders"]]
        return [o for o in out if not statuses or o["status"] in statuses]

    def in_window(self, order: dict) -> bool:
        return order["status"] == "delivered" and data.NOW - _parse(
            order["delivered_at"]
        ) <= timedelta(days=data.RETURN_WINDOW_DAYS)

    def swap_targets(self, order: dict, item: dict) -> list[str]:
        """In-stock variants an order item could be swapped for, in id order."""
        in_order = {i["item_id"] for i in order["items"]}
        variants = self.db["products"][item["product_id"]]["variants"]
        return sorted(v for v, rec in variants.items() if rec["stock"] > 0 and v not in in_order)

    def gift_card(self, user: dict) -> dict | None:
        return next(
            (p for p in user["payment_methods"].values() if p["source"] == "gift_card"), None
        )

    def pick_user(self, ok: Callable[[dict], bool]) -> dict | None:
        ids = list(self.user_ids)
        self.rng.shuffle(ids)
        for uid in ids:
            if uid in self.used_users:
                continue
            user = self.db["users"][uid]
            if ok(user):
                self.used_users.add(uid)
                return user
        return None

    def auth(self, user: dict) -> tuple[dict[str, str], list[Action]]:
        n = user["name"]
        known = {"name": f"{n['first_name']} {n['last_name']}"}
        if self.rng.random() < 0.5:
            known["email"] = user["email"]
            first = Action("lookup_customer_by_email", {"email": user["email"]})
        else:
            known["zip"] = user["address"]["zip"]
            first = Action(
                "lookup_customer_by_name_and_zip",
                {
                    "first_name": n["first_name"],
                    "last_name": n["last_name"],
                    "zip": user["address"]["zip"],
                },
            )
        return known, [first, Action("get_customer_profile", {"user_id": user["user_id"]})]

    def new_address(self, user: dict) -> dict[str, str]:
        while True:
            a = data.make_address(self.rng)
            if a != user["address"]:
                return a

    def choose(self, options: list[str]) -> str:
        return self.rng.choice(options)


def _read(name: str, **args: str) -> Action:
    return Action(name, dict(args))


def _addr_args(a: dict[str, str]) -> dict[str, str]:
    return {k: a[k] for k in ("address1", "address2", "city", "state", "country", "zip")}


# --- read-only templates ---------------------------------------------------------------


def t_status_tracking(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: bool(g.orders(u, "processed", "delivered")))
    if user is None:
        return None
    order = g.rng.choice(g.orders(user, "processed", "delivered"))
    known, gold = g.auth(user)
    known["order_id"] = order["order_id"]
    gold.append(_read("get_order", order_id=order["order_id"]))
    tracking = tuple(f["tracking_id"] for f in order["fulfillments"])
    return _Draft(
        "read_only",
        f"You want to know the status of your order {order['order_id']} and its tracking "
        "number (or numbers, if it ships in several parcels). You do not want to change "
        "anything.",
        known,
        ["the order status", "the tracking numbers"],
        g.choose(
            [
                "Hi, can you tell me where my order is?",
                "Hello! I'd like to check on an order I placed.",
                "hey, any news on my order? i'd like the tracking number",
            ]
        ),
        gold,
        (order["status"], *tracking),
    )


def t_gift_card_balance(g: _Gen) -> _Draft | None:
    def ok(u: dict) -> bool:
        gc = g.gift_card(u)
        return gc is not None and gc["balance"] > 0 and _clean_amount(gc["balance"])

    user = g.pick_user(ok)
    if user is None:
        return None
    gc = g.gift_card(user)
    assert gc is not None
    known, gold = g.auth(user)
    return _Draft(
        "read_only",
        "You want to know how much is left on your gift card. You do not want to change anything.",
        known,
        ["the gift card balance", "the gift card id"],
        g.choose(
            [
                "Hi, how much is left on my gift card?",
                "Hello, could you check my gift card balance for me?",
            ]
        ),
        gold,
        (_money(gc["balance"]),),
    )


def _product_read(g: _Gen, product_id: str) -> list[Action]:
    return [_read("list_products"), _read("get_product", product_id=product_id)]


def t_variant_price(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: True)
    if user is None:
        return None
    pid = g.rng.choice(sorted(g.db["products"]))
    product = g.db["products"][pid]
    item_id = g.rng.choice(sorted(product["variants"]))
    variant = product["variants"][item_id]
    known, gold = g.auth(user)
    known["product"] = product["name"]
    known["variant"] = _opts(variant["options"])
    gold += _product_read(g, pid)
    return _Draft(
        "read_only",
        f"You are thinking of buying a {product['name']} with these options: "
        f"{_opts(variant['options'])}. You want to know its price. You do not want to order "
        "or change anything.",
        known,
        ["the price", "the item id"],
        g.choose(
            [
                f"Hi, how much is the {product['name'].lower()}?",
                f"Hello, I have a question about the price of a {product['name'].lower()}.",
            ]
        ),
        gold,
        (_money(variant["price"]),),
    )


def t_refund_estimate(g: _Gen) -> _Draft | None:
    def candidates(u: dict) -> list[dict]:
        return [o for o in g.orders(u, "delivered") if g.in_window(o) and len(o["items"]) >= 2]

    def ok(u: dict) -> bool:
        return any(
            _clean_amount(o["items"][0]["price"] + o["items"][1]["price"]) for o in candidates(u)
        )

    user = g.pick_user(ok)
    if user is None:
        return None
    order = next(
        o
        for o in candidates(user)
        if _clean_amount(o["items"][0]["price"] + o["items"][1]["price"])
    )
    a, b = order["items"][0], order["items"][1]
    total = round(a["price"] + b["price"], 2)
    known, gold = g.auth(user)
    known["order_id"] = order["order_id"]
    known["items"] = (
        f"the {g.item_desc(a['item_id'], a['product_id'])} and the "
        f"{g.item_desc(b['item_id'], b['product_id'])}"
    )
    gold.append(_read("get_order", order_id=order["order_id"]))
    return _Draft(
        "read_only",
        f"You are considering returning two items of order {order['order_id']}: "
        f"{known['items']}. You want to know how much money you would get back in total. You "
        "are only asking; do not request a return.",
        known,
        ["the refund amount"],
        g.choose(
            [
                "Hi, if I sent back a couple of things from my order, how much would I get back?",
                "Hello, I'm trying to work out what a return would refund me.",
            ]
        ),
        gold,
        (_money(total),),
    )


def t_cheapest_variant(g: _Gen) -> _Draft | None:
    pids = sorted(g.db["products"])
    g.rng.shuffle(pids)
    for pid in pids:
        product = g.db["products"][pid]
        opts = next(iter(product["variants"].values()))["options"]
        for key in sorted(opts):
            values = sorted({v["options"][key] for v in product["variants"].values()})
            for value in values:
                cands = sorted(
                    (v["price"], v["item_id"])
                    for v in product["variants"].values()
                    if v["options"][key] == value and v["stock"] > 0
                )
                if len(cands) < 2 or cands[0][0] == cands[1][0]:
                    continue
                user = g.pick_user(lambda u: True)
                if user is None:
                    return None
                price = cands[0][0]
                known, gold = g.auth(user)
                known["product"] = product["name"]
                known["requirement"] = f"{key}: {value}"
                gold += _product_read(g, pid)
                return _Draft(
                    "read_only",
                    f"You want a {product['name']} with {key} {value}, and you want to know the "
                    "price of the cheapest such variant that is in stock. You do not want to "
                    "order or change anything.",
                    known,
                    ["the prices of the variants", "which variants are in stock"],
                    g.choose(
                        [
                            f"Hi, what's the cheapest {product['name'].lower()} you have?",
                            f"Hello, I'm shopping for a {product['name'].lower()} on a budget.",
                        ]
                    ),
                    gold,
                    (_money(price),),
                )
    return None


# --- single-write templates ------------------------------------------------------------

_REASON_TEXT = {
    "no longer needed": "you no longer need it",
    "ordered by mistake": "you ordered it by mistake",
}


def t_cancel(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: bool(g.orders(u, "pending")))
    if user is None:
        return None
    order = g.rng.choice(g.orders(user, "pending"))
    reason = g.choose(sorted(_REASON_TEXT))
    known, gold = g.auth(user)
    known["order_id"] = order["order_id"]
    known["reason"] = _REASON_TEXT[reason]
    gold.append(_read("get_order", order_id=order["order_id"]))
    gold.append(Action("cancel_order", {"order_id": order["order_id"], "reason": reason}))
    return _Draft(
        "single_write",
        f"You want to cancel your order {order['order_id']} because {_REASON_TEXT[reason]}."
        + _CONFIRM,
        known,
        ["the refund timing"],
        g.choose(
            [
                "Hi, I need to cancel an order.",
                "Hello, I'd like to cancel something I ordered.",
                "hi there, can i still cancel my order?",
            ]
        ),
        gold,
    )


def t_order_address(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: bool(g.orders(u, "pending")))
    if user is None:
        return None
    order = g.rng.choice(g.orders(user, "pending"))
    addr = g.new_address(user)
    known, gold = g.auth(user)
    known["order_id"] = order["order_id"]
    known["new_address"] = _addr_text(addr)
    gold.append(_read("get_order", order_id=order["order_id"]))
    gold.append(Action("change_order_address", {"order_id": order["order_id"], **_addr_args(addr)}))
    return _Draft(
        "single_write",
        f"You want order {order['order_id']} shipped to {_addr_text(addr)} instead"
        + (" (there is no apartment or suite number)" if not addr["address2"] else "")
        + ". Only this order; your default address stays as it is."
        + _CONFIRM,
        known,
        [],
        g.choose(
            [
                "Hi, I need to change where an order is being shipped.",
                "Hello, can I send my order to a different address?",
            ]
        ),
        gold,
    )


def _alt_payment(g: _Gen, user: dict, order: dict) -> dict | None:
    total = sum(i["price"] for i in order["items"])
    for pm in sorted(user["payment_methods"].values(), key=lambda p: p["id"]):
        if pm["id"] == order["payment_method_id"]:
            continue
        if pm["source"] == "gift_card" and pm["balance"] < total:
            continue
        return pm
    return None


def t_order_payment(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: any(_alt_payment(g, u, o) for o in g.orders(u, "pending")))
    if user is None:
        return None
    order = next(o for o in g.orders(user, "pending") if _alt_payment(g, user, o))
    pm = _alt_payment(g, user, order)
    assert pm is not None
    known, gold = g.auth(user)
    known["order_id"] = order["order_id"]
    known["payment_method"] = g.pm_desc(pm)
    gold.append(_read("get_order", order_id=order["order_id"]))
    gold.append(
        Action(
            "change_order_payment",
            {"order_id": order["order_id"], "payment_method_id": pm["id"]},
        )
    )
    return _Draft(
        "single_write",
        f"You want to pay for order {order['order_id']} with {g.pm_desc(pm)} instead of the "
        "method you used." + _CONFIRM,
        known,
        ["payment method ids"],
        g.choose(
            [
                "Hi, I'd like to change how I'm paying for an order.",
                "Hello, can I switch the card on an order I just placed?",
            ]
        ),
        gold,
    )


def t_user_address(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: True)
    if user is None:
        return None
    addr = g.new_address(user)
    known, gold = g.auth(user)
    known["new_address"] = _addr_text(addr)
    gold.append(Action("change_default_address", {"user_id": user["user_id"], **_addr_args(addr)}))
    return _Draft(
        "single_write",
        f"You moved and want your default address on file changed to {_addr_text(addr)}"
        + (" (no apartment or suite number)" if not addr["address2"] else "")
        + ". You do not want any existing order changed."
        + _CONFIRM,
        known,
        [],
        g.choose(
            [
                "Hi, I've moved house and need to update my address.",
                "Hello, could you update the address on my account?",
            ]
        ),
        gold,
    )


def _return_draft(g: _Gen, to_gift_card: bool) -> _Draft | None:
    def order_ok(u: dict, o: dict) -> bool:
        if not g.in_window(o):
            return False
        if to_gift_card:
            gc = g.gift_card(u)
            return gc is not None and gc["id"] != o["payment_method_id"]
        return True

    user = g.pick_user(lambda u: any(order_ok(u, o) for o in g.orders(u, "delivered")))
    if user is None:
        return None
    order = next(o for o in g.orders(user, "delivered") if order_ok(user, o))
    k = min(len(order["items"]), g.rng.choice([1, 1, 2]))
    items = order["items"][:k]
    pm = g.gift_card(user) if to_gift_card else user["payment_methods"][order["payment_method_id"]]
    assert pm is not None
    known, gold = g.auth(user)
    known["order_id"] = order["order_id"]
    known["items_to_return"] = "; ".join(g.item_desc(i["item_id"], i["product_id"]) for i in items)
    known["refund_to"] = g.pm_desc(pm) if to_gift_card else "the original payment method"
    gold.append(_read("get_order", order_id=order["order_id"]))
    gold.append(
        Action(
            "request_return",
            {
                "order_id": order["order_id"],
                "item_ids": [i["item_id"] for i in items],
                "payment_method_id": pm["id"],
            },
        )
    )
    what = "this item" if k == 1 else "these items"
    return _Draft(
        "single_write",
        f"You want to return {what} from order {order['order_id']}: "
        f"{known['items_to_return']}. Nothing else from the order. You want the refund on "
        f"{known['refund_to']}." + _CONFIRM,
        known,
        ["item ids"],
        g.choose(
            [
                "Hi, I'd like to return something I received.",
                "Hello, I need to send back part of a delivery.",
                "hi, how do i return an item?",
            ]
        ),
        gold,
    )


def t_return_original(g: _Gen) -> _Draft | None:
    return _return_draft(g, to_gift_card=False)


def t_return_gift_card(g: _Gen) -> _Draft | None:
    return _return_draft(g, to_gift_card=True)


def _swap_pick(g: _Gen, user: dict, order: dict) -> tuple[dict, str, dict] | None:
    """(order item, new item id, payment method) for a one-item swap, or None."""
    for item in order["items"]:
        targets = g.swap_targets(order, item)
        if not targets:
            continue
        new_id = targets[g.rng.randrange(len(targets))]
        price = g.db["products"][item["product_id"]]["variants"][new_id]["price"]
        diff = price - item["price"]
        methods = sorted(user["payment_methods"].values(), key=lambda p: p["id"])
        methods.sort(key=lambda p: p["id"] != order["payment_method_id"])
        for pm in methods:
            if pm["source"] == "gift_card" and diff > 0 and pm["balance"] < diff:
                continue
            return item, new_id, pm
    return None


def _swap_draft(g: _Gen, exchange: bool) -> tuple[_Draft, dict, dict] | None:
    def order_ok(u: dict, o: dict) -> bool:
        if exchange:
            return g.in_window(o) and _swap_pick(g, u, o) is not None
        return (
            o["status"] == "pending"
            and not o.get("items_modified")
            and _swap_pick(g, u, o) is not None
        )

    user = g.pick_user(lambda u: any(order_ok(u, o) for o in g.orders(u)))
    if user is None:
        return None
    order = next(o for o in g.orders(user) if order_ok(user, o))
    pick = _swap_pick(g, user, order)
    assert pick is not None
    item, new_id, pm = pick
    product = g.db["products"][item["product_id"]]
    new_opts = _opts(product["variants"][new_id]["options"])
    known, gold = g.auth(user)
    known["order_id"] = order["order_id"]
    known["item"] = g.item_desc(item["item_id"], item["product_id"])
    known["wanted_variant"] = new_opts
    known["payment_method"] = g.pm_desc(pm)
    gold += [
        _read("get_order", order_id=order["order_id"]),
        _read("get_product", product_id=item["product_id"]),
    ]
    name = "request_exchange" if exchange else "change_order_items"
    gold.append(
        Action(
            name,
            {
                "order_id": order["order_id"],
                "item_ids": [item["item_id"]],
                "new_item_ids": [new_id],
                "payment_method_id": pm["id"],
            },
        )
    )
    verb = "exchange" if exchange else "change, before it ships,"
    draft = _Draft(
        "single_write",
        f"In order {order['order_id']} you want to {verb} the {known['item']} for the "
        f"{product['name']} with {new_opts}. Nothing else in the order changes. Any price "
        f"difference should be settled with {g.pm_desc(pm)}." + _CONFIRM,
        known,
        ["item ids", "the price difference"],
        g.choose(
            [
                f"Hi, I got the wrong {product['name'].lower()} variant and want to swap it.",
                "Hello, I'd like to exchange an item for a different option.",
            ]
            if exchange
            else [
                f"Hi, I want to change the {product['name'].lower()} on an order I just placed.",
                "Hello, can I pick a different option for something in my order?",
            ]
        ),
        gold,
    )
    return draft, user, order


def t_exchange(g: _Gen) -> _Draft | None:
    r = _swap_draft(g, exchange=True)
    return r[0] if r else None


def t_modify_items(g: _Gen) -> _Draft | None:
    r = _swap_draft(g, exchange=False)
    return r[0] if r else None


def _two_swaps(g: _Gen, user: dict, order: dict) -> tuple[list[tuple[dict, str]], dict] | None:
    """Two (order item, new item id) swaps and a payment method covering the difference."""
    swaps: list[tuple[dict, str]] = []
    taken: set[str] = set()
    for item in order["items"]:
        targets = [t for t in g.swap_targets(order, item) if t not in taken]
        if targets:
            new_id = targets[len(targets) // 2]
            swaps.append((item, new_id))
            taken.add(new_id)
        if len(swaps) == 2:
            break
    if len(swaps) < 2:
        return None
    variants = {i: v for p in g.db["products"].values() for i, v in p["variants"].items()}
    diff = sum(variants[new]["price"] - it["price"] for it, new in swaps)
    methods = sorted(user["payment_methods"].values(), key=lambda p: p["id"])
    methods.sort(key=lambda p: p["id"] != order["payment_method_id"])
    for pm in methods:
        if not (pm["source"] == "gift_card" and diff > 0 and pm["balance"] < diff):
            return swaps, pm
    return None


def _swap_two(g: _Gen, exchange: bool) -> _Draft | None:
    def order_ok(u: dict, o: dict) -> bool:
        if exchange:
            ok = g.in_window(o)
        else:
            ok = o["status"] == "pending" and not o.get("items_modified")
        return ok and _two_swaps(g, u, o) is not None

    user = g.pick_user(lambda u: any(order_ok(u, o) for o in g.orders(u)))
    if user is None:
        return None
    order = next(o for o in g.orders(user) if order_ok(user, o))
    found = _two_swaps(g, user, order)
    assert found is not None
    swaps, pm = found
    wants = [
        f"the {g.item_desc(it['item_id'], it['product_id'])} for the variant with "
        f"{_opts(g.db['products'][it['product_id']]['variants'][new]['options'])}"
        for it, new in swaps
    ]
    known, gold = g.auth(user)
    known["order_id"] = order["order_id"]
    known["changes"] = "; ".join(wants)
    known["payment_method"] = g.pm_desc(pm)
    gold.append(_read("get_order", order_id=order["order_id"]))
    for pid in dict.fromkeys(it["product_id"] for it, _ in swaps):
        gold.append(_read("get_product", product_id=pid))
    name = "request_exchange" if exchange else "change_order_items"
    gold.append(
        Action(
            name,
            {
                "order_id": order["order_id"],
                "item_ids": [it["item_id"] for it, _ in swaps],
                "new_item_ids": [new for _, new in swaps],
                "payment_method_id": pm["id"],
            },
        )
    )
    verb = "exchange" if exchange else "change, before the order ships,"
    return _Draft(
        "single_write",
        f"In order {order['order_id']} you want to {verb} two items: {wants[0]}, and "
        f"{wants[1]}. Mention the second item only after the agent has the first. Nothing "
        f"else in the order changes. Any price difference should be settled with "
        f"{g.pm_desc(pm)}." + _CONFIRM,
        known,
        ["item ids", "the price difference"],
        g.choose(
            [
                "Hi, a couple of things I received aren't the right size or colour.",
                "Hello, I'd like to exchange two items from a delivery.",
            ]
            if exchange
            else [
                "Hi, I want to change a few options on an order I placed.",
                "Hello, can I adjust a couple of items in my order before it ships?",
            ]
        ),
        gold,
    )


def t_exchange_two(g: _Gen) -> _Draft | None:
    return _swap_two(g, exchange=True)


def t_modify_two_items(g: _Gen) -> _Draft | None:
    return _swap_two(g, exchange=False)


def _pm_keyword(pm: dict) -> str:
    """What any correct naming of a payment method contains."""
    if pm["source"] == "credit_card":
        return pm["last_four"]
    return "gift card" if pm["source"] == "gift_card" else "paypal"


def t_order_total(g: _Gen) -> _Draft | None:
    def ok(o: dict) -> bool:
        return (
            o["status"] in ("pending", "processed", "delivered")
            and len(o["payment_history"]) == 1
            and _clean_amount(o["payment_history"][0]["amount"])
        )

    user = g.pick_user(lambda u: any(ok(o) for o in g.orders(u)))
    if user is None:
        return None
    order = next(o for o in g.orders(user) if ok(o))
    pm = user["payment_methods"][order["payment_method_id"]]
    known, gold = g.auth(user)
    known["order_id"] = order["order_id"]
    gold.append(_read("get_order", order_id=order["order_id"]))
    return _Draft(
        "read_only",
        f"You want to know how much you paid in total for order {order['order_id']}, and "
        "which payment method was charged. You do not want to change anything.",
        known,
        ["the order total", "the payment method"],
        g.choose(
            [
                "Hi, I'm checking my statement. How much was my last order?",
                "Hello, could you tell me what I was charged for an order?",
            ]
        ),
        gold,
        (_money(order["payment_history"][0]["amount"]), _pm_keyword(pm)),
    )


# --- multi-write templates -------------------------------------------------------------


def t_cancel_and_readdress(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: len(g.orders(u, "pending")) >= 2)
    if user is None:
        return None
    a, b = g.orders(user, "pending")[:2]
    reason = g.choose(sorted(_REASON_TEXT))
    addr = g.new_address(user)
    known, gold = g.auth(user)
    known.update(
        cancel_order_id=a["order_id"],
        reason=_REASON_TEXT[reason],
        readdress_order_id=b["order_id"],
        new_address=_addr_text(addr),
    )
    gold += [
        _read("get_order", order_id=a["order_id"]),
        Action("cancel_order", {"order_id": a["order_id"], "reason": reason}),
        _read("get_order", order_id=b["order_id"]),
        Action("change_order_address", {"order_id": b["order_id"], **_addr_args(addr)}),
    ]
    return _Draft(
        "multi_write",
        f"You have two things to sort out. First, cancel order {a['order_id']} because "
        f"{_REASON_TEXT[reason]}. Second, order {b['order_id']} should go to "
        f"{_addr_text(addr)} instead; your default address stays the same. Bring up the second "
        "request only after the first is done." + _CONFIRM,
        known,
        [],
        "Hi, I have a couple of changes to make to my orders.",
        gold,
    )


def t_return_and_exchange(g: _Gen) -> _Draft | None:
    def ok(u: dict) -> bool:
        wins = [o for o in g.orders(u, "delivered") if g.in_window(o)]
        return len(wins) >= 2 and _swap_pick(g, u, wins[1]) is not None

    user = g.pick_user(ok)
    if user is None:
        return None
    a, b = [o for o in g.orders(user, "delivered") if g.in_window(o)][:2]
    pick = _swap_pick(g, user, b)
    assert pick is not None
    item, new_id, pm = pick
    product = g.db["products"][item["product_id"]]
    new_opts = _opts(product["variants"][new_id]["options"])
    ret = a["items"][:2]
    known, gold = g.auth(user)
    known.update(
        return_order_id=a["order_id"],
        items_to_return="; ".join(g.item_desc(i["item_id"], i["product_id"]) for i in ret),
        refund_to="the original payment method",
        exchange_order_id=b["order_id"],
        exchange_item=g.item_desc(item["item_id"], item["product_id"]),
        wanted_variant=new_opts,
        payment_method=g.pm_desc(pm),
    )
    gold += [
        _read("get_order", order_id=a["order_id"]),
        Action(
            "request_return",
            {
                "order_id": a["order_id"],
                "item_ids": [i["item_id"] for i in ret],
                "payment_method_id": a["payment_method_id"],
            },
        ),
        _read("get_order", order_id=b["order_id"]),
        _read("get_product", product_id=item["product_id"]),
        Action(
            "request_exchange",
            {
                "order_id": b["order_id"],
                "item_ids": [item["item_id"]],
                "new_item_ids": [new_id],
                "payment_method_id": pm["id"],
            },
        ),
    ]
    return _Draft(
        "multi_write",
        f"First, you want to return from order {a['order_id']}: {known['items_to_return']}, "
        "refunded to the original payment method. Then, in order "
        f"{b['order_id']}, you want to exchange the {known['exchange_item']} for the "
        f"{product['name']} with {new_opts}, settling any price difference with "
        f"{g.pm_desc(pm)}. Bring up the exchange only after the return is done." + _CONFIRM,
        known,
        ["item ids"],
        "Hello, I need to return some things and exchange another.",
        gold,
    )


def t_move_house(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: bool(g.orders(u, "pending")))
    if user is None:
        return None
    order = g.orders(user, "pending")[0]
    addr = g.new_address(user)
    known, gold = g.auth(user)
    known.update(order_id=order["order_id"], new_address=_addr_text(addr))
    gold += [
        Action("change_default_address", {"user_id": user["user_id"], **_addr_args(addr)}),
        _read("get_order", order_id=order["order_id"]),
        Action("change_order_address", {"order_id": order["order_id"], **_addr_args(addr)}),
    ]
    return _Draft(
        "multi_write",
        f"You moved to {_addr_text(addr)}. You want your default address updated, and your "
        f"pending order {order['order_id']} sent to the new address too." + _CONFIRM,
        known,
        [],
        "Hi, I just moved and need my address changed.",
        gold,
    )


def t_items_and_address(g: _Gen) -> _Draft | None:
    r = _swap_draft(g, exchange=False)
    if r is None:
        return None
    draft, user, order = r
    addr = g.new_address(user)
    draft.category = "multi_write"
    draft.known["new_address"] = _addr_text(addr)
    assert draft.instructions.endswith(_CONFIRM)
    draft.instructions = (
        draft.instructions[: -len(_CONFIRM)]
        + f" After that, you also want this order shipped to {_addr_text(addr)}; your default "
        "address stays the same." + _CONFIRM
    )
    draft.gold.append(
        Action("change_order_address", {"order_id": order["order_id"], **_addr_args(addr)})
    )
    return draft


def t_cancel_two(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: len(g.orders(u, "pending")) >= 2)
    if user is None:
        return None
    a, b = g.orders(user, "pending")[:2]
    reason = g.choose(sorted(_REASON_TEXT))
    known, gold = g.auth(user)
    known.update(
        order_ids=f"{a['order_id']} and {b['order_id']}",
        reason=_REASON_TEXT[reason].replace(" it", " them"),
    )
    for o in (a, b):
        gold += [
            _read("get_order", order_id=o["order_id"]),
            Action("cancel_order", {"order_id": o["order_id"], "reason": reason}),
        ]
    return _Draft(
        "multi_write",
        f"You want to cancel both of your orders {a['order_id']} and {b['order_id']}, because "
        f"{_REASON_TEXT[reason].replace(' it', ' them')}." + _CONFIRM,
        known,
        [],
        "Hi, I need to cancel a couple of orders.",
        gold,
    )


def t_return_and_readdress(g: _Gen) -> _Draft | None:
    user = g.pick_user(
        lambda u: any(g.in_window(o) and len(o["items"]) >= 2 for o in g.orders(u, "delivered"))
    )
    if user is None:
        return None
    order = next(o for o in g.orders(user, "delivered") if g.in_window(o) and len(o["items"]) >= 2)
    items = order["items"][:2]
    addr = g.new_address(user)
    known, gold = g.auth(user)
    known.update(
        order_id=order["order_id"],
        items_to_return="; ".join(g.item_desc(i["item_id"], i["product_id"]) for i in items),
        refund_to="the original payment method",
        new_address=_addr_text(addr),
    )
    gold += [
        _read("get_order", order_id=order["order_id"]),
        Action(
            "request_return",
            {
                "order_id": order["order_id"],
                "item_ids": [i["item_id"] for i in items],
                "payment_method_id": order["payment_method_id"],
            },
        ),
        Action("change_default_address", {"user_id": user["user_id"], **_addr_args(addr)}),
    ]
    return _Draft(
        "multi_write",
        f"You want to return two items from order {order['order_id']}: "
        f"{known['items_to_return']}, refunded to the original payment method. Then you want "
        f"your default address changed to {_addr_text(addr)}." + _CONFIRM,
        known,
        ["item ids"],
        "Hello, I'd like to return a couple of items, and I have an address change too.",
        gold,
    )


# --- refusal templates -----------------------------------------------------------------


def _refusal(
    g: _Gen,
    user: dict,
    order: dict,
    reason: str,
    instructions: str,
    opening: str,
    forbidden: Action | None,
    extra_known: dict[str, str] | None = None,
) -> _Draft:
    known, gold = g.auth(user)
    known["order_id"] = order["order_id"]
    known.update(extra_known or {})
    gold.append(_read("get_order", order_id=order["order_id"]))
    return _Draft(
        "refusal",
        instructions + _ACCEPT_REFUSAL,
        known,
        [],
        opening,
        gold,
        (reason,),
        reason,
        forbidden,
    )


def t_cancel_delivered(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: bool(g.orders(u, "delivered")))
    if user is None:
        return None
    order = g.orders(user, "delivered")[0]
    return _refusal(
        g,
        user,
        order,
        "not pending",
        f"You want to cancel order {order['order_id']} because you no longer need it.",
        "Hi, I want to cancel an order please.",
        Action("cancel_order", {"order_id": order["order_id"], "reason": "no longer needed"}),
        {"reason": "you no longer need it"},
    )


def t_readdress_processed(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: bool(g.orders(u, "processed")))
    if user is None:
        return None
    order = g.orders(user, "processed")[0]
    addr = g.new_address(user)
    return _refusal(
        g,
        user,
        order,
        "not pending",
        f"You want order {order['order_id']} delivered to {_addr_text(addr)} instead.",
        "Hello, I need to change the delivery address of an order.",
        Action("change_order_address", {"order_id": order["order_id"], **_addr_args(addr)}),
        {"new_address": _addr_text(addr)},
    )


def t_return_processed(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: bool(g.orders(u, "processed")))
    if user is None:
        return None
    order = g.orders(user, "processed")[0]
    item = order["items"][0]
    return _refusal(
        g,
        user,
        order,
        "not delivered",
        f"You want to return the {g.item_desc(item['item_id'], item['product_id'])} from order "
        f"{order['order_id']}, refunded to the original payment method.",
        "Hi, I'd like to return an item.",
        Action(
            "request_return",
            {
                "order_id": order["order_id"],
                "item_ids": [item["item_id"]],
                "payment_method_id": order["payment_method_id"],
            },
        ),
        {"item_to_return": g.item_desc(item["item_id"], item["product_id"])},
    )


def t_return_wrong_method(g: _Gen) -> _Draft | None:
    def bad_pm(u: dict, o: dict) -> dict | None:
        return next(
            (
                p
                for p in sorted(u["payment_methods"].values(), key=lambda p: p["id"])
                if p["id"] != o["payment_method_id"] and p["source"] != "gift_card"
            ),
            None,
        )

    user = g.pick_user(
        lambda u: any(g.in_window(o) and bad_pm(u, o) for o in g.orders(u, "delivered"))
    )
    if user is None:
        return None
    order = next(o for o in g.orders(user, "delivered") if g.in_window(o) and bad_pm(user, o))
    pm = bad_pm(user, order)
    assert pm is not None
    item = order["items"][0]
    return _refusal(
        g,
        user,
        order,
        "refund method not allowed",
        f"You want to return the {g.item_desc(item['item_id'], item['product_id'])} from order "
        f"{order['order_id']}, and you want the refund on {g.pm_desc(pm)} and nowhere else.",
        "Hello, I want to send an item back and get my money on a different card.",
        Action(
            "request_return",
            {
                "order_id": order["order_id"],
                "item_ids": [item["item_id"]],
                "payment_method_id": pm["id"],
            },
        ),
        {
            "item_to_return": g.item_desc(item["item_id"], item["product_id"]),
            "refund_to": g.pm_desc(pm),
        },
    )


def t_return_late(g: _Gen) -> _Draft | None:
    def late(o: dict) -> bool:
        return o["status"] == "delivered" and not g.in_window(o)

    user = g.pick_user(lambda u: any(late(o) for o in g.orders(u)))
    if user is None:
        return None
    order = next(o for o in g.orders(user) if late(o))
    item = order["items"][0]
    return _refusal(
        g,
        user,
        order,
        "return window closed",
        f"You want to return the {g.item_desc(item['item_id'], item['product_id'])} from order "
        f"{order['order_id']}, refunded to the original payment method.",
        "Hi, I'd like to return something I bought a while ago.",
        Action(
            "request_return",
            {
                "order_id": order["order_id"],
                "item_ids": [item["item_id"]],
                "payment_method_id": order["payment_method_id"],
            },
        ),
        {"item_to_return": g.item_desc(item["item_id"], item["product_id"])},
    )


def t_modify_twice(g: _Gen) -> _Draft | None:
    def ok(u: dict, o: dict) -> bool:
        return (
            o["status"] == "pending"
            and bool(o.get("items_modified"))
            and _swap_pick(g, u, o) is not None
        )

    user = g.pick_user(lambda u: any(ok(u, o) for o in g.orders(u)))
    if user is None:
        return None
    order = next(o for o in g.orders(user) if ok(user, o))
    pick = _swap_pick(g, user, order)
    assert pick is not None
    item, new_id, pm = pick
    product = g.db["products"][item["product_id"]]
    new_opts = _opts(product["variants"][new_id]["options"])
    return _refusal(
        g,
        user,
        order,
        "already modified",
        f"In order {order['order_id']}, which you already changed once, you now want to change "
        f"the {g.item_desc(item['item_id'], item['product_id'])} to the variant with "
        f"{new_opts}, paying any difference with {g.pm_desc(pm)}.",
        "Hi, I need to change an item on my order again.",
        Action(
            "change_order_items",
            {
                "order_id": order["order_id"],
                "item_ids": [item["item_id"]],
                "new_item_ids": [new_id],
                "payment_method_id": pm["id"],
            },
        ),
        {
            "item": g.item_desc(item["item_id"], item["product_id"]),
            "wanted_variant": new_opts,
            "payment_method": g.pm_desc(pm),
        },
    )


def t_exchange_other_product(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: any(g.in_window(o) for o in g.orders(u, "delivered")))
    if user is None:
        return None
    order = next(o for o in g.orders(user, "delivered") if g.in_window(o))
    item = order["items"][0]
    others = sorted(p for p in g.db["products"] if p != item["product_id"])
    other = g.db["products"][g.rng.choice(others)]
    new_id = next(v for v, rec in sorted(other["variants"].items()) if rec["stock"] > 0)
    pm_id = order["payment_method_id"]
    return _refusal(
        g,
        user,
        order,
        "same product only",
        f"You want to exchange the {g.item_desc(item['item_id'], item['product_id'])} from "
        f"order {order['order_id']} for a {other['name']} "
        f"({_opts(other['variants'][new_id]['options'])}) instead.",
        f"Hello, can I swap something I received for a {other['name'].lower()}?",
        Action(
            "request_exchange",
            {
                "order_id": order["order_id"],
                "item_ids": [item["item_id"]],
                "new_item_ids": [new_id],
                "payment_method_id": pm_id,
            },
        ),
        {
            "item": g.item_desc(item["item_id"], item["product_id"]),
            "wanted_product": f"{other['name']} ({_opts(other['variants'][new_id]['options'])})",
        },
    )


def t_other_account(g: _Gen) -> _Draft | None:
    user = g.pick_user(lambda u: True)
    owner = g.pick_user(lambda u: bool(g.orders(u, "pending")))
    if user is None or owner is None:
        return None
    order = g.orders(owner, "pending")[0]
    first = owner["name"]["first_name"]
    return _refusal(
        g,
        user,
        order,
        "another account",
        f"You want to cancel order {order['order_id']}, which your friend {first} placed on "
        "their own account, because they no longer need it; they asked you to call for them. "
        "You only give your own details to log in.",
        "Hi, I'm calling about an order I need cancelled.",
        None,
        {"reason": "it is no longer needed"},
    )


def t_gift_card_short(g: _Gen) -> _Draft | None:
    def ok(u: dict, o: dict) -> bool:
        gc = g.gift_card(u)
        return (
            o["status"] == "pending"
            and gc is not None
            and gc["id"] != o["payment_method_id"]
            and gc["balance"] < sum(i["price"] for i in o["items"])
        )

    user = g.pick_user(lambda u: any(ok(u, o) for o in g.orders(u)))
    if user is None:
        return None
    order = next(o for o in g.orders(user) if ok(user, o))
    gc = g.gift_card(user)
    assert gc is not None
    return _refusal(
        g,
        user,
        order,
        "insufficient balance",
        f"You want to pay for order {order['order_id']} entirely with your gift card instead "
        "of the method you used.",
        "Hello, I'd like to use my gift card for an order.",
        Action(
            "change_order_payment",
            {"order_id": order["order_id"], "payment_method_id": gc["id"]},
        ),
        {"payment_method": "your gift card"},
    )


def t_exchange_out_of_stock(g: _Gen) -> _Draft | None:
    def pick(o: dict) -> tuple[dict, str] | None:
        if not g.in_window(o):
            return None
        for item in o["items"]:
            variants = g.db["products"][item["product_id"]]["variants"]
            empty = sorted(
                v for v, r in variants.items() if r["stock"] == 0 and v != item["item_id"]
            )
            if empty:
                return item, empty[0]
        return None

    user = g.pick_user(lambda u: any(pick(o) for o in g.orders(u, "delivered")))
    if user is None:
        return None
    order = next(o for o in g.orders(user, "delivered") if pick(o))
    found = pick(order)
    assert found is not None
    item, new_id = found
    product = g.db["products"][item["product_id"]]
    new_opts = _opts(product["variants"][new_id]["options"])
    return _refusal(
        g,
        user,
        order,
        "out of stock",
        f"You want to exchange the {g.item_desc(item['item_id'], item['product_id'])} from "
        f"order {order['order_id']} for the {product['name']} with {new_opts}, and no other "
        "variant.",
        "Hi, I'd like to exchange an item for a different option.",
        Action(
            "request_exchange",
            {
                "order_id": order["order_id"],
                "item_ids": [item["item_id"]],
                "new_item_ids": [new_id],
                "payment_method_id": order["payment_method_id"],
            },
        ),
        {"item": g.item_desc(item["item_id"], item["product_id"]), "wanted_variant": new_opts},
    )


# Template, number of tasks. Consumed round-robin so every prefix of the task list mixes
# categories.
TEMPLATES: list[tuple[Callable[[_Gen], _Draft | None], int]] = [
    (t_status_tracking, 4),
    (t_cancel, 3),
    (t_cancel_and_readdress, 3),
    (t_cancel_delivered, 2),
    (t_gift_card_balance, 3),
    (t_order_address, 3),
    (t_return_and_exchange, 2),
    (t_readdress_processed, 2),
    (t_variant_price, 3),
    (t_order_payment, 2),
    (t_move_house, 2),
    (t_return_processed, 1),
    (t_refund_estimate, 3),
    (t_user_address, 2),
    (t_items_and_address, 2),
    (t_return_wrong_method, 2),
    (t_cheapest_variant, 2),
    (t_return_original, 3),
    (t_cancel_two, 2),
    (t_return_late, 2),
    (t_return_gift_card, 2),
    (t_return_and_readdress, 2),
    (t_modify_twice, 1),
    (t_exchange, 3),
    (t_exchange_other_product, 1),
    (t_modify_items, 3),
    (t_other_account, 1),
    (t_gift_card_short, 1),
    (t_exchange_out_of_stock, 1),
    (t_exchange_two, 2),
    (t_order_total, 2),
    (t_modify_two_items, 1),
]


def _schedule() -> Iterator[Callable[[_Gen], _Draft | None]]:
    left = [n for _, n in TEMPLATES]
    while any(left):
        for i, (fn, _) in enumerate(TEMPLATES):
            if left[i]:
                left[i] -= 1
                yield fn


def _check(db: dict, draft: _Draft, where: str) -> None:
    """Gold writes must succeed (and change the db); a refusal's forbidden write must fail."""

    before = hash_db(db)
    for a in draft.gold:
        try:
            _TOOL_FNS[a.name](db, **a.arguments)
        except ToolError as e:
            raise AssertionError(f"{where}: gold action {a.name} fails: {e}") from None
    writes = [a for a in draft.gold if a.name in _WRITES]
    if draft.category == "refusal" or draft.category == "read_only":
        assert not writes, f"{where}: a {draft.category} task has gold writes"
    else:
        assert writes and hash_db(db) != before, f"{where}: gold writes leave the db unchanged"
    if draft.forbidden is not None:
        try:
            _TOOL_FNS[draft.forbidden.name](db, **draft.forbidden.arguments)
        except ToolError as e:
            assert draft.refusal and draft.refusal in str(e), f"{where}: refused for {e}"
        else:
            raise AssertionError(f"{where}: the forbidden write {draft.forbidden} succeeds")


def build_tasks() -> list[Task]:
    db = data.make_db(0)
    g = _Gen(db)
    drafts: list[_Draft] = []
    for fn in _schedule():
        draft = fn(g)
        if draft is None:
            raise RuntimeError(f"retail task template {fn.__name__} found no candidate")
        # Tools copy records before writing (copy-on-write), so a shallow copy suffices.
        _check(
            {k: dict(v) if isinstance(v, dict) else v for k, v in db.items()}, draft, fn.__name__
        )
        drafts.append(draft)
    tasks = []
    for i, d in enumerate(drafts):
        persona = PERSONAS[i % len(PERSONAS)]
        flags = {"refusal"} if d.category == "refusal" else set()
        if any(a.name in _WRITES for a in d.gold):
            flags.add("write")
        tasks.append(
            Task(
                id=f"{DOMAIN}/{i:03d}",
                domain=DOMAIN,
                category=d.category,
                scenario=UserScenario(
                    persona=persona,
                    instructions=d.instructions,
                    known_info=dict(d.known),
                    unknown_info=list(d.unknown),
                    opening=d.opening,
                ),
                gold_actions=tuple(d.gold),
                required_outputs=tuple(d.required),
                flags=frozenset(flags | d.extra_flags),
                refusal_reason=d.refusal,
            )
        )
    return tasks
