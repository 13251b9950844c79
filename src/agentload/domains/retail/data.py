"""Deterministic generation of the retail database.

The database is a pure function of the seed: every random choice comes from one
`random.Random(seed)` and every date from the frozen clock `NOW`. Records are kept compact
(order items hold ids and prices only; names and options live in the catalogue) so that a
fresh per-episode copy stays cheap.

Layout (JSON types only, string keys):

    {"now": str,
     "users":    {user_id: {user_id, name: {first_name, last_name}, email, address,
                            payment_methods: {pm_id: {id, source, ...}}, orders: [order_id]}},
     "products": {product_id: {product_id, name, variants: {item_id: {item_id, options,
                               price, stock}}}},
     "orders":   {order_id: {order_id, user_id, status, created_at, address, items,
                             fulfillments, payment_history, ...}}}
"""

from __future__ import annotations

import functools
import itertools
import random
from datetime import UTC, datetime, timedelta

import orjson

# The frozen clock: every date in the database and every policy rule is relative to it.
NOW = datetime(2026, 5, 15, 12, 0, 0, tzinfo=UTC)
NOW_ISO = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
RETURN_WINDOW_DAYS = 30

N_USERS = 420
ORDERS_PER_USER = (1, 4)  # inclusive range
MAX_VARIANTS = 26

COLOURS = ["black", "white", "navy", "grey", "red", "green", "blue", "sand", "charcoal", "teal"]

# (product name, base price in dollars, option name -> values). Written for agentload.
CATALOGUE: list[tuple[str, int, dict[str, list[str]]]] = [
    (
        "Trail Running Shoes",
        92,
        {"size": ["7", "8", "9", "10", "11", "12"], "colour": ["black", "slate", "orange", "teal"]},
    ),
    (
        "Rain Jacket",
        118,
        {
            "size": ["S", "M", "L", "XL"],
            "colour": ["navy", "olive", "yellow"],
            "hood": ["fixed", "packable"],
        },
    ),
    (
        "Merino T-Shirt",
        46,
        {"size": ["S", "M", "L", "XL"], "colour": ["black", "white", "grey", "forest green"]},
    ),
    (
        "Hiking Backpack",
        139,
        {
            "capacity": ["28L", "38L", "48L"],
            "colour": ["black", "red", "grey"],
            "frame": ["internal", "frameless"],
        },
    ),
    (
        "Water Bottle",
        26,
        {
            "capacity": ["500ml", "750ml", "1L"],
            "material": ["stainless steel", "glass", "plastic"],
            "colour": ["blue", "white", "black"],
        },
    ),
    (
        "Coffee Grinder",
        112,
        {
            "burr": ["conical", "flat"],
            "hopper": ["150g", "250g"],
            "finish": ["black", "silver", "copper"],
        },
    ),
    (
        "Espresso Machine",
        419,
        {
            "boiler": ["single", "dual"],
            "finish": ["stainless", "matte black", "white"],
            "grinder": ["built-in", "none"],
        },
    ),
    (
        "Electric Kettle",
        57,
        {
            "capacity": ["1L", "1.7L"],
            "material": ["glass", "stainless steel", "plastic"],
            "temperature control": ["yes", "no"],
        },
    ),
    (
        "Desk Lamp",
        63,
        {
            "colour": ["black", "white", "brass"],
            "bulb": ["LED", "halogen"],
            "arm": ["fixed", "adjustable"],
        },
    ),
    (
        "Office Chair",
        264,
        {
            "colour": ["black", "grey", "blue"],
            "material": ["mesh", "leather", "fabric"],
            "armrests": ["fixed", "adjustable"],
        },
    ),
    (
        "Standing Desk",
        486,
        {
            "width": ["120cm", "140cm", "160cm"],
            "top": ["oak", "walnut", "white"],
            "motor": ["single", "dual"],
        },
    ),
    (
        "Mechanical Keyboard",
        97,
        {
            "switch": ["linear", "tactile", "clicky"],
            "layout": ["full", "tenkeyless", "75%"],
            "backlight": ["RGB", "white", "none"],
        },
    ),
    (
        "Wireless Mouse",
        42,
        {
            "colour": ["black", "white", "grey"],
            "connection": ["bluetooth", "USB receiver"],
            "grip": ["right-handed", "ambidextrous"],
        },
    ),
    (
        "Wireless Earbuds",
        131,
        {
            "colour": ["black", "white", "sand"],
            "noise cancelling": ["yes", "no"],
            "case": ["wireless charging", "USB-C"],
        },
    ),
    (
        "Over-Ear Headphones",
        193,
        {
            "colour": ["black", "silver", "navy"],
            "noise cancelling": ["yes", "no"],
            "connection": ["wired", "wireless"],
        },
    ),
    (
        "Bluetooth Speaker",
        83,
        {
            "colour": ["black", "red", "teal"],
            "size": ["mini", "standard", "large"],
            "waterproof": ["yes", "no"],
        },
    ),
    (
        "Smart Watch",
        252,
        {
            "case size": ["40mm", "44mm"],
            "strap": ["silicone", "leather", "metal"],
            "colour": ["black", "silver", "rose gold"],
        },
    ),
    (
        "Fitness Tracker",
        71,
        {"colour": ["black", "blue", "pink"], "gps": ["yes", "no"], "band": ["small", "large"]},
    ),
    (
        "E-Reader",
        143,
        {
            "storage": ["8GB", "16GB", "32GB"],
            "screen": ["6 inch", "7 inch"],
            "colour": ["black", "sand"],
        },
    ),
    (
        "Phone Charger",
        27,
        {"wattage": ["20W", "30W", "65W"], "ports": ["1", "2", "3"], "colour": ["white", "black"]},
    ),
    (
        "Power Bank",
        48,
        {
            "capacity": ["10000mAh", "20000mAh"],
            "colour": ["black", "white", "blue"],
            "wireless charging": ["yes", "no"],
        },
    ),
    (
        "Yoga Mat",
        36,
        {
            "thickness": ["4mm", "6mm", "8mm"],
            "material": ["natural rubber", "TPE", "cork"],
            "colour": ["purple", "green", "grey"],
        },
    ),
    (
        "Dumbbell Set",
        152,
        {
            "weight range": ["2-10kg", "5-25kg"],
            "material": ["iron", "rubber coated"],
            "adjustable": ["yes", "no"],
        },
    ),
    (
        "Camping Tent",
        214,
        {
            "capacity": ["1 person", "2 person", "4 person"],
            "season": ["3-season", "4-season"],
            "colour": ["green", "orange", "grey"],
        },
    ),
    (
        "Sleeping Bag",
        96,
        {
            "temperature rating": ["-5C", "0C", "5C"],
            "fill": ["down", "synthetic"],
            "length": ["regular", "long"],
        },
    ),
    (
        "Bicycle Helmet",
        67,
        {"size": ["S", "M", "L"], "colour": ["white", "black", "red"], "visor": ["yes", "no"]},
    ),
    (
        "Sunglasses",
        87,
        {
            "frame": ["acetate", "metal"],
            "lens": ["polarized", "standard"],
            "colour": ["tortoise", "black", "gold"],
        },
    ),
    (
        "Wallet",
        41,
        {
            "material": ["leather", "canvas"],
            "style": ["bifold", "cardholder", "zip"],
            "colour": ["brown", "black", "green"],
        },
    ),
    (
        "Leather Belt",
        39,
        {
            "size": ["S", "M", "L", "XL"],
            "colour": ["brown", "black", "tan"],
            "buckle": ["silver", "brass"],
        },
    ),
    (
        "Wool Sweater",
        89,
        {
            "size": ["S", "M", "L", "XL"],
            "colour": ["cream", "navy", "rust"],
            "neck": ["crew", "v-neck"],
        },
    ),
    (
        "Denim Jeans",
        72,
        {
            "waist": ["28", "30", "32", "34", "36"],
            "fit": ["slim", "straight", "relaxed"],
            "wash": ["light", "dark"],
        },
    ),
    (
        "Cast Iron Skillet",
        49,
        {
            "diameter": ["20cm", "26cm", "30cm"],
            "handle": ["short", "long"],
            "seasoning": ["pre-seasoned", "raw"],
        },
    ),
    (
        "Chef Knife",
        76,
        {
            "blade length": ["18cm", "21cm", "24cm"],
            "steel": ["carbon", "stainless"],
            "handle": ["wood", "composite"],
        },
    ),
    (
        "Blender",
        101,
        {
            "capacity": ["1L", "1.5L", "2L"],
            "power": ["800W", "1200W"],
            "colour": ["black", "white", "red"],
        },
    ),
    (
        "Air Fryer",
        122,
        {
            "capacity": ["3L", "5L", "7L"],
            "display": ["digital", "dial"],
            "colour": ["black", "white"],
        },
    ),
    (
        "Robot Vacuum",
        324,
        {"mop": ["yes", "no"], "navigation": ["lidar", "camera"], "colour": ["black", "white"]},
    ),
    (
        "Scented Candle",
        23,
        {
            "scent": ["cedar", "lavender", "citrus", "vanilla"],
            "size": ["small", "medium", "large"],
            "wax": ["soy", "beeswax"],
        },
    ),
    (
        "Bath Towel Set",
        56,
        {
            "colour": ["white", "grey", "sage"],
            "material": ["cotton", "linen", "bamboo"],
            "pieces": ["2", "4", "6"],
        },
    ),
    (
        "Notebook",
        16,
        {"size": ["A5", "A4"], "ruling": ["lined", "dotted", "blank"], "cover": ["hard", "soft"]},
    ),
    (
        "Board Game",
        44,
        {"edition": ["standard", "deluxe"], "language": ["English", "Spanish", "French"]},
    ),
]

FIRST_NAMES = [
    "Ava",
    "Noah",
    "Mia",
    "Liam",
    "Zoe",
    "Ethan",
    "Isla",
    "Mateo",
    "Nora",
    "Omar",
    "Priya",
    "Lucas",
    "Hana",
    "Felix",
    "Chloe",
    "Diego",
    "Amara",
    "Jonas",
    "Leila",
    "Owen",
    "Sofia",
    "Ravi",
    "Grace",
    "Kenji",
    "Elena",
    "Marcus",
    "Yara",
    "Tomas",
    "Ingrid",
    "Samir",
    "Julia",
    "Theo",
    "Aisha",
    "Hugo",
    "Maya",
    "Victor",
    "Nadia",
    "Caleb",
    "Rosa",
    "Arjun",
]
LAST_NAMES = [
    "Chen",
    "Okafor",
    "Garcia",
    "Novak",
    "Schmidt",
    "Patel",
    "Kim",
    "Rossi",
    "Larsen",
    "Haddad",
    "Silva",
    "Nguyen",
    "Kowalski",
    "Moreau",
    "Tanaka",
    "Brennan",
    "Ivanova",
    "Mensah",
    "Lopez",
    "Fischer",
    "Ahmed",
    "Costa",
    "Lindqvist",
    "Murphy",
    "Sato",
    "Dubois",
    "Hughes",
    "Romero",
    "Berg",
    "Walsh",
    "Yilmaz",
    "Nakamura",
    "Jensen",
    "Ortiz",
    "Carter",
    "Adeyemi",
]
# (city, state, zip prefix): real US cities; street names are invented.
CITIES = [
    ("Portland", "OR", "972"),
    ("Austin", "TX", "787"),
    ("Denver", "CO", "802"),
    ("Columbus", "OH", "432"),
    ("Raleigh", "NC", "276"),
    ("Madison", "WI", "537"),
    ("Tucson", "AZ", "857"),
    ("Boise", "ID", "837"),
    ("Richmond", "VA", "232"),
    ("Omaha", "NE", "681"),
    ("Spokane", "WA", "992"),
    ("Savannah", "GA", "314"),
    ("Albany", "NY", "122"),
    ("Provo", "UT", "846"),
    ("Lexington", "KY", "405"),
    ("Sacramento", "CA", "958"),
    ("Burlington", "VT", "054"),
    ("Tulsa", "OK", "741"),
]
STREETS = [
    "Maple Avenue",
    "Cedar Lane",
    "Harbor Street",
    "Willow Drive",
    "Sunset Boulevard",
    "Juniper Court",
    "Aspen Way",
    "Lakeview Road",
    "Orchard Street",
    "Birch Terrace",
    "Granite Avenue",
    "Meadow Lane",
    "Pioneer Street",
    "Riverside Drive",
    "Elm Street",
]
CARD_BRANDS = ["visa", "mastercard", "amex"]

STATUS_WEIGHTS = [
    ("pending", 28),
    ("processed", 16),
    ("delivered", 42),
    ("cancelled", 6),
    ("return requested", 4),
    ("exchange requested", 4),
]


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def _price(rng: random.Random, base: float) -> float:
    # Cents never end in 0, so a price reads the same however an agent formats it.
    cents = rng.choice([c for c in range(1, 100) if c % 10])
    return round(int(base) + cents / 100, 2)


def _digits(rng: random.Random, n: int, used: set[str]) -> str:
    while True:
        s = str(rng.randrange(10 ** (n - 1), 10**n))
        if s not in used:
            used.add(s)
            return s


def make_address(rng: random.Random) -> dict[str, str]:
    city, state, zp = rng.choice(CITIES)
    return {
        "address1": f"{rng.randint(10, 9899)} {rng.choice(STREETS)}",
        "address2": rng.choice(
            ["", "", "", f"Apt {rng.randint(1, 40)}", f"Suite {rng.randint(100, 900)}"]
        ),
        "city": city,
        "state": state,
        "country": "USA",
        "zip": f"{zp}{rng.randint(1, 99):02d}",
    }


def _products(rng: random.Random, used: set[str]) -> dict[str, dict]:
    products: dict[str, dict] = {}
    for name, base, options in CATALOGUE:
        pid = _digits(rng, 10, used)
        keys = list(options)
        offsets = {(k, v): rng.uniform(-0.12, 0.22) for k in keys for v in options[k]}
        combos = list(itertools.product(*(options[k] for k in keys)))
        rng.shuffle(combos)
        combos = sorted(combos[:MAX_VARIANTS])
        variants: dict[str, dict] = {}
        for combo in combos:
            item_id = _digits(rng, 10, used)
            factor = 1 + sum(offsets[(k, v)] for k, v in zip(keys, combo, strict=True))
            stock = 0 if rng.random() < 0.15 else rng.randint(1, 60)
            variants[item_id] = {
                "item_id": item_id,
                "options": dict(zip(keys, combo, strict=True)),
                "price": _price(rng, base * factor),
                "stock": stock,
            }
        products[pid] = {"product_id": pid, "name": name, "variants": variants}
    return products


def _payment_methods(rng: random.Random, used: set[str]) -> dict[str, dict]:
    # At most one method per source, so "your gift card" always names exactly one.
    sources = ["credit_card", "gift_card", "paypal"]
    k = rng.choices([1, 2, 3], weights=[35, 45, 20])[0]
    chosen = sorted(rng.sample(sources, k), key=sources.index)
    methods: dict[str, dict] = {}
    for src in chosen:
        pm_id = f"{src}_{_digits(rng, 7, used)}"
        pm: dict = {"id": pm_id, "source": src}
        if src == "credit_card":
            pm["brand"] = rng.choice(CARD_BRANDS)
            pm["last_four"] = f"{rng.randint(0, 9999):04d}"
        elif src == "gift_card":
            pm["balance"] = round(rng.randint(0, 320) + rng.randint(0, 99) / 100, 2)
        methods[pm_id] = pm
    return methods


def _order(
    rng: random.Random,
    user: dict,
    products: list[dict],
    used: set[str],
) -> dict:
    # The order of the draws below is part of the database: changing it changes every
    # generated order (and data_version must then change).
    order_id = f"R{_digits(rng, 7, used)}"
    status = rng.choices([s for s, _ in STATUS_WEIGHTS], weights=[w for _, w in STATUS_WEIGHTS])[0]
    items = _order_items(rng, products)
    total = round(sum(i["price"] for i in items), 2)
    pm_id = rng.choice(sorted(user["payment_methods"]))
    # A gift card pays in full too; its balance is what is left after such payments.
    created = _order_created(rng, status)
    address = dict(user["address"]) if rng.random() < 0.85 else make_address(rng)
    order: dict = {
        "order_id": order_id,
        "user_id": user["user_id"],
        "status": status,
        "created_at": iso(created),
        "address": address,
        "items": items,
        "fulfillments": [],
        "payment_method_id": pm_id,
        "payment_history": [{"type": "payment", "amount": total, "payment_method_id": pm_id}],
    }
    if status in ("processed", "delivered", "return requested", "exchange requested"):
        order["fulfillments"] = _fulfillments(rng, items, used)
    if status in ("delivered", "return requested", "exchange requested"):
        delivered = created + timedelta(days=rng.randint(2, 6), hours=rng.randint(0, 12))
        order["delivered_at"] = iso(min(delivered, NOW - timedelta(hours=6)))
    if status == "pending":
        order["items_modified"] = rng.random() < 0.12
    if status == "cancelled":
        order["cancel_reason"] = rng.choice(["no longer needed", "ordered by mistake"])
        order["payment_history"].append(
            {"type": "refund", "amount": total, "payment_method_id": pm_id}
        )
    if status == "return requested":
        order["return_request"] = _return_request(rng, items, pm_id)
    if status == "exchange requested":
        order["exchange_request"] = _exchange_request(rng, items, products, pm_id)
    return order


def _order_items(rng: random.Random, products: list[dict]) -> list[dict]:
    """One to five distinct items (variants), each with its price."""
    n_items = rng.choices([1, 2, 3, 4, 5], weights=[30, 32, 20, 12, 6])[0]
    items: list[dict] = []
    seen: set[str] = set()
    while len(items) < n_items:
        prod = rng.choice(products)
        item_id = rng.choice(list(prod["variants"]))
        if item_id in seen:
            continue
        seen.add(item_id)
        v = prod["variants"][item_id]
        items.append({"item_id": item_id, "product_id": prod["product_id"], "price": v["price"]})
    return items


def _order_created(rng: random.Random, status: str) -> datetime:
    """When an order was placed: recent for pending ones, longer ago the further it went."""
    if status == "pending":
        return NOW - timedelta(hours=rng.randint(2, 96))
    if status == "processed":
        return NOW - timedelta(hours=rng.randint(48, 200))
    if status in ("return requested", "exchange requested"):
        return NOW - timedelta(days=rng.randint(8, 30))
    return NOW - timedelta(days=rng.randint(7, 150), hours=rng.randint(0, 23))


def _fulfillments(rng: random.Random, items: list[dict], used: set[str]) -> list[dict]:
    """One or two parcels, each with its own tracking number."""
    ids = [i["item_id"] for i in items]
    cut = rng.randint(1, len(ids) - 1) if len(ids) > 1 and rng.random() < 0.3 else len(ids)
    parts = [ids[:cut], ids[cut:]] if cut < len(ids) else [ids]
    return [{"tracking_id": _digits(rng, 12, used), "item_ids": p} for p in parts]


def _return_request(rng: random.Random, items: list[dict], pm_id: str) -> dict:
    k = rng.randint(1, len(items))
    return {
        "item_ids": [i["item_id"] for i in items[:k]],
        "payment_method_id": pm_id,
        "refund_amount": round(sum(i["price"] for i in items[:k]), 2),
    }


def _exchange_request(
    rng: random.Random, items: list[dict], products: list[dict], pm_id: str
) -> dict:
    it = items[0]
    prod = next(p for p in products if p["product_id"] == it["product_id"])
    others = [v for v in prod["variants"] if v != it["item_id"]]
    new_id = rng.choice(others)
    return {
        "item_ids": [it["item_id"]],
        "new_item_ids": [new_id],
        "payment_method_id": pm_id,
        "price_difference": round(prod["variants"][new_id]["price"] - it["price"], 2),
    }


def generate(seed: int = 0) -> dict:
    """Build the database for `seed` (uncached; see `base_db_blob`)."""
    rng = random.Random(f"agentload-retail-{seed}")
    used: set[str] = set()
    products = _products(rng, used)
    product_list = list(products.values())
    users: dict[str, dict] = {}
    emails: set[str] = set()
    name_zip: set[tuple[str, str, str]] = set()
    while len(users) < N_USERS:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        address = make_address(rng)
        key = (first, last, address["zip"])
        if key in name_zip:
            continue  # name + zip must identify one user
        name_zip.add(key)
        user_id = f"{first.lower()}_{last.lower()}_{_digits(rng, 4, used)}"
        email = f"{first.lower()}.{last.lower()}{rng.randint(1, 999)}@example.com"
        if email in emails:
            email = f"{first.lower()}{last.lower()}{_digits(rng, 4, used)}@example.com"
        emails.add(email)
        users[user_id] = {
            "user_id": user_id,
            "name": {"first_name": first, "last_name": last},
            "email": email,
            "address": address,
            "payment_methods": _payment_methods(rng, used),
            "orders": [],
        }
    orders: dict[str, dict] = {}
    for user in users.values():
        for _ in range(rng.randint(*ORDERS_PER_USER)):
            order = _order(rng, user, product_list, used)
            orders[order["order_id"]] = order
            user["orders"].append(order["order_id"])
    return {"now": NOW_ISO, "users": users, "products": products, "orders": orders}


@functools.lru_cache(maxsize=8)
def base_db_blob(seed: int = 0) -> bytes:
    """The generated database as JSON bytes, built once per seed per process."""
    return orjson.dumps(generate(seed))


def make_db(seed: int = 0) -> dict:
    """A private copy of the database for `seed`."""
    return orjson.loads(base_db_blob(seed))
