"""Skyline Air tasks, built from the seed-0 database by templates.

Each template picks the entities that fit it (a reservation booked within the last day, a
gold member whose flight was cancelled, ...) with a fixed-seed RNG, writes the customer's
scenario, and derives the gold actions and required outputs from the data; every task's gold
actions are run through the real tools (on a scratch copy of the database) while the tasks
are built, so tasks and data cannot disagree. Every task starts from a fresh seed-0 database.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import date, datetime, timedelta

import orjson

from agentload.domains.airline import tools as T
from agentload.domains.airline.data import AIRPORTS, FREE_BAGS, NOW, make_db
from agentload.domains.base import Action, Task, ToolError, UserScenario

TASK_SEED = 20250612
DAY_AGO = (datetime.fromisoformat(NOW) - timedelta(days=1)).isoformat()
TODAY = NOW[:10]

PERSONAS = (
    "Friendly and chatty; gives details one at a time, only when asked.",
    "Terse and in a hurry; answers in a few words.",
    "Polite and formal; double-checks numbers before agreeing.",
    "A little anxious; asks for reassurance but follows the agent's lead.",
    "Direct and practical; expects the agent to do the arithmetic.",
)

# --- predicates over the database ---


def _inst(db: dict, seg: dict) -> dict:
    return db["flights"][seg["flight_number"]]["dates"][seg["date"]]


def flown(db: dict, res: dict) -> bool:
    return any(_inst(db, s)["status"] in ("departed", "landed") for s in res["flights"])


def airline_cancelled(db: dict, res: dict) -> list[dict]:
    return [s for s in res["flights"] if _inst(db, s)["status"] == "cancelled"]


def all_bookable(db: dict, res: dict) -> bool:
    return all(_inst(db, s)["status"] in T.BOOKABLE for s in res["flights"])


def recent(res: dict) -> bool:
    return res["created_at"] > DAY_AGO


def free_allowance(db: dict, res: dict) -> int:
    membership = db["users"][res["user_id"]]["membership"]
    return FREE_BAGS[membership][res["cabin"]] * len(res["passengers"])


def paid(res: dict) -> int:
    return sum(p["amount"] for p in res["payment_history"])


def card(user: dict) -> dict:
    return next(m for m in user["payment_methods"].values() if m["source"] == "credit_card")


def card_words(m: dict) -> str:
    if m["source"] == "gift_card":
        return "your gift card"
    return f"your {m['brand'].title()} card ending in {m['last_four']}"


def city(code: str) -> str:
    return f"{AIRPORTS[code][0]} ({code})"


def say_date(day: str) -> str:
    d = date.fromisoformat(day)
    return f"{d:%B} {d.day}, {d.year}"


def _money(n: int) -> str:
    return str(abs(n))


class _Builder:
    """Turns templates into tasks: the seed-0 db to pick from, the RNG, what is taken."""

    def __init__(self) -> None:
        self.db = make_db(0)
        self.rng = random.Random(TASK_SEED)
        self.used: set[str] = set()  # reservation ids and user ids already in a task
        self.tasks: list[Task] = []

    # -- selection --

    def reservations(self, pred: Callable[[dict], bool]) -> list[dict]:
        out = [
            r
            for rid, r in sorted(self.db["reservations"].items())
            if rid not in self.used and r["user_id"] not in self.used and r["status"] == "active"
            if pred(r)
        ]
        self.rng.shuffle(out)
        return out

    def claim(self, *keys: str) -> None:
        self.used.update(keys)

    def run(self, actions: list[Action]) -> None:
        """Check that the gold actions succeed, on a scratch copy of the db if they write."""
        tools = {t.name: t for t in T.TOOLS}
        writes = any(tools[a.name].writes for a in actions)
        scratch = orjson.loads(orjson.dumps(self.db)) if writes else self.db
        for a in actions:
            try:
                tools[a.name].fn(scratch, **a.arguments)
            except ToolError as e:  # a template bug, not a data condition
                raise AssertionError(f"gold action {a} fails: {e}") from None

    def add(
        self,
        category: str,
        instructions: str,
        opening: str,
        known: dict[str, str],
        gold: list[Action],
        outputs: list[str],
        unknown: list[str] | None = None,
        refusal: str | None = None,
    ) -> None:
        self.run(gold)
        self.tasks.append(
            Task(
                id="",  # numbered once all templates have run
                domain="airline",
                category=category,
                scenario=UserScenario(
                    persona=self.rng.choice(PERSONAS),
                    instructions=instructions,
                    known_info=known,
                    unknown_info=unknown or [],
                    opening=opening,
                ),
                gold_actions=tuple(gold),
                required_outputs=tuple(outputs),
                flags=frozenset({"refusal"}) if refusal else frozenset(),
                refusal_reason=refusal,
            )
        )


def A(name: str, **arguments: object) -> Action:
    return Action(name, dict(arguments))


def _lookup(res: dict) -> list[Action]:
    return [
        A("get_customer_profile", user_id=res["user_id"]),
        A("get_booking", reservation_id=res["reservation_id"]),
    ]


def _statuses(res: dict) -> list[Action]:
    """What an agent checks before a cancellation: has any flight flown or been cancelled?"""
    return [
        A("check_flight_status", flight_number=s["flight_number"], date=s["date"])
        for s in res["flights"]
    ]


def _legs(segs: list[dict]) -> list[dict]:
    return [{"flight_number": s["flight_number"], "date": s["date"]} for s in segs]


def _known(res: dict, **more: str) -> dict[str, str]:
    return {"user_id": res["user_id"], "reservation_id": res["reservation_id"], **more}


# --- read-only templates ---


def t_flight_status(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: True):
        if n == 0:
            return
        seg = next(
            (s for s in res["flights"] if _inst(b.db, s)["status"] == "delayed"),
            None,
        )
        if seg is None:
            continue
        est = _inst(b.db, seg)["estimated_departure"][11:16].lstrip("0")  # "7:15" in "07:15"
        b.claim(res["reservation_id"], res["user_id"])
        b.add(
            "read_only",
            f"You are flying on Skyline Air flight {seg['flight_number']} on "
            f"{say_date(seg['date'])}. You want to know whether it is on time and, if not, "
            "its new estimated departure time. You need nothing else.",
            f"Hi, is flight {seg['flight_number']} on {say_date(seg['date'])} on time?",
            {"flight_number": seg["flight_number"], "date": seg["date"]},
            [A("check_flight_status", flight_number=seg["flight_number"], date=seg["date"])],
            ["delayed", est],
        )
        n -= 1
        yield


def t_total_paid(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: len(r["payment_history"]) == 1):
        if n == 0:
            return
        b.claim(res["reservation_id"], res["user_id"])
        b.add(
            "read_only",
            f"You want to know how much you paid in total for reservation "
            f"{res['reservation_id']}, for your expense report. You do not want to change "
            "anything.",
            "Hello, I need the total amount I paid for one of my bookings.",
            _known(res),
            _lookup(res),
            [_money(paid(res))],
        )
        n -= 1
        yield


def t_gift_balance(b: _Builder, n: int) -> Iterator[None]:
    users = [
        u
        for uid, u in sorted(b.db["users"].items())
        if uid not in b.used
        and any(
            m["source"] == "gift_card" and m["balance"] >= 100
            for m in u["payment_methods"].values()
        )
    ]
    b.rng.shuffle(users)
    for u in users[:n]:
        gift = next(m for m in u["payment_methods"].values() if m["source"] == "gift_card")
        b.claim(u["user_id"])
        b.add(
            "read_only",
            "You want to know the remaining balance on the Skyline Air gift card in your "
            "profile. Nothing else.",
            "Hi! Can you tell me how much is left on my gift card?",
            {"user_id": u["user_id"]},
            [A("get_customer_profile", user_id=u["user_id"])],
            [_money(gift["balance"])],
        )
        yield


def _future_days(b: _Builder) -> list[str]:
    days = sorted(next(iter(b.db["flights"].values()))["dates"])
    return [d for d in days if d > TODAY]


def _cheapest(offers: list[dict], cabin: str, pax: int) -> dict | None:
    """The single cheapest offer in `cabin`, if it has seats for `pax`: "the cheapest" must
    be unambiguous, and not a full flight that an agent could fairly name."""
    if not offers:
        return None
    ranked = sorted(offers, key=lambda o: o["prices"][cabin])
    if len(ranked) > 1 and ranked[0]["prices"][cabin] == ranked[1]["prices"][cabin]:
        return None
    return ranked[0] if ranked[0]["available_seats"][cabin] >= pax else None


def _route_offers(b: _Builder, min_offers: int) -> Iterator[tuple[str, str, str, list[dict]]]:
    routes = sorted({(f["origin"], f["destination"]) for f in b.db["flights"].values()})
    b.rng.shuffle(routes)
    days = _future_days(b)
    for origin, dest in routes:
        day = b.rng.choice(days[1:])
        offers = T.find_nonstop_flights(b.db, origin, dest, day)
        if len(offers) >= min_offers:
            yield origin, dest, day, offers


def t_cheapest_flight(b: _Builder, n: int) -> Iterator[None]:
    for origin, dest, day, offers in _route_offers(b, 2):
        if n == 0:
            return
        best = _cheapest(offers, "economy", 1)
        if best is None:
            continue
        b.add(
            "read_only",
            f"You are considering a one-way trip from {city(origin)} to {city(dest)} on "
            f"{say_date(day)}. You want to know which nonstop flight has the cheapest economy "
            "seat and its price. You are only asking; you do not want to book now.",
            f"Hi, what's the cheapest nonstop economy flight from {AIRPORTS[origin][0]} to "
            f"{AIRPORTS[dest][0]} on {say_date(day)}?",
            {"origin": origin, "destination": dest, "date": day},
            [A("find_nonstop_flights", origin=origin, destination=dest, date=day)],
            [best["flight_number"], _money(best["prices"]["economy"])],
            unknown=["your user id (you are not asked for it)"],
        )
        n -= 1
        yield


# --- single-write templates ---

# Why the customer cancels, per cancellation rule that allows it.
REASONS = {
    "recent": "you booked it by mistake",
    "business": "your plans changed",
    "insurance": "you are ill and your doctor told you not to travel",
    "airline": "one of the flights was cancelled by the airline",
}


def _cancel_ok(kind: str) -> Callable[[_Builder, dict], bool]:
    def pred(b: _Builder, r: dict) -> bool:
        if flown(b.db, r) or r["payment_history"][0]["amount"] <= 0:
            return False
        cancelled = bool(airline_cancelled(b.db, r))
        return {
            "recent": recent(r) and r["cabin"] != "business" and not r["insurance"],
            "business": r["cabin"] == "business" and not recent(r) and not cancelled,
            "insurance": r["insurance"]
            and r["cabin"] != "business"
            and not recent(r)
            and not cancelled,
            "airline": cancelled and r["cabin"] != "business" and not recent(r),
        }[kind]

    return pred


def t_cancel(kind: str) -> Callable[[_Builder, int], Iterator[None]]:
    def template(b: _Builder, n: int) -> Iterator[None]:
        pred = _cancel_ok(kind)
        for res in b.reservations(lambda r: pred(b, r)):
            if n == 0:
                return
            reason = REASONS[kind]
            b.claim(res["reservation_id"], res["user_id"])
            b.add(
                "single_write",
                f"You want to cancel reservation {res['reservation_id']} because {reason}. "
                "You want to know how much will be refunded. If the agent says it cannot be "
                "cancelled, accept that.",
                "Hi, I need to cancel a reservation.",
                _known(res, reason=reason),
                [
                    *_lookup(res),
                    *_statuses(res),
                    A("cancel_booking", reservation_id=res["reservation_id"]),
                ],
                [_money(paid(res))],
            )
            n -= 1
            yield

    return template


def _bags_plan(b: _Builder, res: dict, add: int) -> tuple[int, int, int]:
    total = res["total_baggages"] + add
    nonfree = max(res["nonfree_baggages"], total - free_allowance(b.db, res))
    return total, nonfree, (nonfree - res["nonfree_baggages"]) * 50


def _add_bags(b: _Builder, res: dict, add: int, pay: dict) -> tuple[Action, int]:
    """The gold bag update adding `add` bags (allowance from res's cabin), and its fee."""
    total, nonfree, cost = _bags_plan(b, res, add)
    action = A(
        "set_booking_bags",
        reservation_id=res["reservation_id"],
        total_baggages=total,
        nonfree_baggages=nonfree,
        payment_method_id=pay["id"],
    )
    return action, cost


def _bag_candidates(b: _Builder) -> list[dict]:
    def ok(r: dict) -> bool:
        if flown(b.db, r) or not all_bookable(b.db, r):
            return False
        _, _, cost = _bags_plan(b, r, 2)
        return cost > 0 and r["total_baggages"] + 2 <= 5 * len(r["passengers"])

    return b.reservations(ok)


def t_add_bags(b: _Builder, n: int) -> Iterator[None]:
    for res in _bag_candidates(b)[:n]:
        user = b.db["users"][res["user_id"]]
        pay = card(user)
        bags, cost = _add_bags(b, res, 2, pay)
        b.claim(res["reservation_id"], res["user_id"])
        b.add(
            "single_write",
            f"You want to add two checked bags to reservation {res['reservation_id']}. Pay "
            f"any fee with {card_words(pay)}. You want to know the fee before agreeing.",
            "Hello, I'd like to add some checked bags to my trip.",
            _known(res, payment=card_words(pay)),
            [*_lookup(res), bags],
            [_money(cost)],
        )
        yield


def _fixed_passengers(b: _Builder, res: dict) -> tuple[list[dict], str]:
    pax = [dict(p) for p in res["passengers"]]
    i = b.rng.randrange(len(pax))
    old = pax[i]
    d = date.fromisoformat(old["dob"])
    new_dob = d.replace(day=d.day + 1 if d.day < 28 else 1)
    pax[i] = {**old, "dob": new_dob.isoformat()}
    words = (
        f"The date of birth of passenger {old['first_name']} {old['last_name']} is wrong: it "
        f"should be {say_date(new_dob.isoformat())}, not {say_date(old['dob'])}."
    )
    return pax, words


def t_fix_passenger(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: not flown(b.db, r))[:n]:
        pax, words = _fixed_passengers(b, res)
        b.claim(res["reservation_id"], res["user_id"])
        b.add(
            "single_write",
            f"{words} It is on reservation {res['reservation_id']}. You want it corrected; "
            "nothing else changes.",
            "Hi, there's a mistake in a passenger's details on my booking.",
            _known(res),
            [
                *_lookup(res),
                A(
                    "change_booking_passengers",
                    reservation_id=res["reservation_id"],
                    passengers=pax,
                ),
            ],
            [],
        )
        yield


def _booking(b: _Builder, user: dict, pay: dict, insurance: bool, bags: int):
    """A one-way direct economy booking for the user alone on the cheapest flight."""
    for origin, dest, day, offers in _route_offers(b, 2):
        best = _cheapest(offers, "economy", 1)
        if best is None:
            continue
        nonfree = max(0, bags - FREE_BAGS[user["membership"]]["economy"])
        total = best["prices"]["economy"] + (30 if insurance else 0) + 50 * nonfree
        if pay["source"] == "gift_card" and pay["balance"] < total:
            continue
        me = {
            "first_name": user["name"]["first_name"],
            "last_name": user["name"]["last_name"],
            "dob": user["dob"],
        }
        action = A(
            "create_booking",
            user_id=user["user_id"],
            origin=origin,
            destination=dest,
            trip_type="one_way",
            cabin="economy",
            flights=[{"flight_number": best["flight_number"], "date": day}],
            passengers=[me],
            payment_method_id=pay["id"],
            total_baggages=bags,
            nonfree_baggages=nonfree,
            insurance=insurance,
        )
        words = (
            f"You want to book a one-way economy trip from {city(origin)} to {city(dest)} on "
            f"{say_date(day)}, for yourself only, on the cheapest nonstop flight. You "
            f"{'want' if insurance else 'do not want'} travel insurance. You will check "
            f"{bags} bag{'s' if bags != 1 else ''}. Pay with {card_words(pay)}."
        )
        search = A("find_nonstop_flights", origin=origin, destination=dest, date=day)
        return words, [search, action], total
    raise AssertionError("no route fits a booking")


def _new_users(b: _Builder) -> list[dict]:
    users = [u for uid, u in sorted(b.db["users"].items()) if uid not in b.used]
    b.rng.shuffle(users)
    return users


def t_book(b: _Builder, n: int) -> Iterator[None]:
    for user in _new_users(b)[:n]:
        insurance = b.rng.random() < 0.5
        bags = b.rng.randrange(0, 4)
        words, gold, total = _booking(b, user, card(user), insurance, bags)
        b.claim(user["user_id"])
        b.add(
            "single_write",
            words + " You want to know the total price and the new reservation id.",
            "Hi, I'd like to book a flight.",
            {"user_id": user["user_id"], "date_of_birth": user["dob"]},
            [A("get_customer_profile", user_id=user["user_id"]), *gold],
            [_money(total)],
        )
        yield


def _upgrade_ok(b: _Builder, r: dict) -> bool:
    pax = len(r["passengers"])
    return (
        r["cabin"] == "economy"
        and not flown(b.db, r)
        and all_bookable(b.db, r)
        and all(_inst(b.db, s)["available_seats"]["business"] >= pax for s in r["flights"])
    )


def _upgrade(b: _Builder, res: dict, pay: dict) -> tuple[list[Action], int]:
    searches = [
        A("find_nonstop_flights", origin=s["origin"], destination=s["destination"], date=s["date"])
        for s in res["flights"]
    ]
    diff = sum(_inst(b.db, s)["prices"]["business"] - s["price"] for s in res["flights"]) * len(
        res["passengers"]
    )
    action = A(
        "change_booking_flights",
        reservation_id=res["reservation_id"],
        cabin="business",
        flights=_legs(res["flights"]),
        payment_method_id=pay["id"],
    )
    return [*searches, action], diff


def t_upgrade(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: _upgrade_ok(b, r))[:n]:
        pay = card(b.db["users"][res["user_id"]])
        gold, diff = _upgrade(b, res, pay)
        b.claim(res["reservation_id"], res["user_id"])
        b.add(
            "single_write",
            f"You want to upgrade reservation {res['reservation_id']} to business class for "
            f"all flights and passengers. Pay the difference with {card_words(pay)}. You want "
            "to know the price difference before agreeing.",
            "Hi, can I upgrade my booking to business?",
            _known(res, payment=card_words(pay)),
            [*_lookup(res), *gold],
            [_money(diff)],
        )
        yield


def _move_ok(b: _Builder, r: dict) -> str | None:
    """The new date for a one-segment trip moved to the same flight a few days later."""
    if r["trip_type"] != "one_way" or len(r["flights"]) != 1 or r["cabin"] == "basic_economy":
        return None
    seg = r["flights"][0]
    if flown(b.db, r) or seg["date"] <= TODAY:
        return None
    dates = b.db["flights"][seg["flight_number"]]["dates"]
    for k in (2, 3, 1):
        day = (date.fromisoformat(seg["date"]) + timedelta(days=k)).isoformat()
        inst = dates.get(day)
        if (
            inst
            and inst["status"] == "scheduled"
            and inst["available_seats"][r["cabin"]] >= len(r["passengers"])
            and abs(inst["prices"][r["cabin"]] - seg["price"]) >= 15
        ):
            return day
    return None


def t_change_date(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: _move_ok(b, r) is not None)[:n]:
        day = _move_ok(b, res)
        assert day is not None
        seg = res["flights"][0]
        pay = card(b.db["users"][res["user_id"]])
        new_price = b.db["flights"][seg["flight_number"]]["dates"][day]["prices"][res["cabin"]]
        diff = (new_price - seg["price"]) * len(res["passengers"])
        b.claim(res["reservation_id"], res["user_id"])
        b.add(
            "single_write",
            f"You want to move reservation {res['reservation_id']} from {say_date(seg['date'])} "
            f"to {say_date(day)}, on the same flight number ({seg['flight_number']}) and in the "
            f"same cabin. Any fare difference goes on {card_words(pay)}. You want to know the "
            "difference first.",
            "Hello, I need to change the date of my flight.",
            _known(res, new_date=day, payment=card_words(pay)),
            [
                *_lookup(res),
                A(
                    "find_nonstop_flights",
                    origin=seg["origin"],
                    destination=seg["destination"],
                    date=day,
                ),
                A(
                    "change_booking_flights",
                    reservation_id=res["reservation_id"],
                    cabin=res["cabin"],
                    flights=[{"flight_number": seg["flight_number"], "date": day}],
                    payment_method_id=pay["id"],
                ),
            ],
            [_money(diff)],
        )
        yield


def _compensable(b: _Builder, r: dict) -> bool:
    user = b.db["users"][r["user_id"]]
    return (user["membership"] != "regular" or r["insurance"] or r["cabin"] == "business") and bool(
        airline_cancelled(b.db, r)
    )


def _compensation(b: _Builder, res: dict) -> tuple[list[Action], int]:
    seg = airline_cancelled(b.db, res)[0]
    amount = 100 * len(res["passengers"])
    return [
        A("check_flight_status", flight_number=seg["flight_number"], date=seg["date"]),
        A("issue_travel_certificate", user_id=res["user_id"], amount=amount),
    ], amount


def t_compensation(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: _compensable(b, r))[:n]:
        gold, amount = _compensation(b, res)
        seg = airline_cancelled(b.db, res)[0]
        b.claim(res["reservation_id"], res["user_id"])
        b.add(
            "single_write",
            f"Your flight {seg['flight_number']} on {say_date(seg['date'])} (reservation "
            f"{res['reservation_id']}) was cancelled by Skyline Air. You are upset and you ask "
            "for compensation. You do not want to change or cancel the reservation.",
            "Hi. My flight got cancelled and I'm not happy about it.",
            _known(res, flight_number=seg["flight_number"]),
            [*_lookup(res), *gold],
            [_money(amount)],
        )
        yield


# --- multi-write templates ---


def t_cancel_and_compensate(b: _Builder, n: int) -> Iterator[None]:
    def ok(r: dict) -> bool:
        return _compensable(b, r) and _cancel_ok("airline")(b, r)

    for res in b.reservations(ok)[:n]:
        gold, amount = _compensation(b, res)
        b.claim(res["reservation_id"], res["user_id"])
        b.add(
            "multi_write",
            f"One flight of reservation {res['reservation_id']} was cancelled by Skyline Air. "
            "You want to cancel the whole reservation, get your money back, and you ask for "
            "compensation for the trouble.",
            "Hello, the airline cancelled my flight and I want to cancel my whole trip.",
            _known(res, reason="the airline cancelled a flight"),
            [
                *_lookup(res),
                *_statuses(res),
                A("cancel_booking", reservation_id=res["reservation_id"]),
                gold[-1],
            ],
            [_money(paid(res)), _money(amount)],
        )
        yield


def t_bags_two(b: _Builder, n: int) -> Iterator[None]:
    by_user: dict[str, list[dict]] = {}
    for r in _bag_candidates(b):
        by_user.setdefault(r["user_id"], []).append(r)
    pairs = [sorted(rs, key=lambda r: r["reservation_id"])[:2] for rs in by_user.values()]
    pairs = [p for p in pairs if len(p) == 2]
    for r1, r2 in pairs[:n]:
        user = b.db["users"][r1["user_id"]]
        pay = card(user)
        gold = [A("get_customer_profile", user_id=user["user_id"])]
        cost = 0
        for r in (r1, r2):
            bags, c = _add_bags(b, r, 2, pay)
            cost += c
            gold += [A("get_booking", reservation_id=r["reservation_id"]), bags]
        b.claim(r1["reservation_id"], r2["reservation_id"], user["user_id"])
        b.add(
            "multi_write",
            f"You want to add two checked bags to each of your reservations "
            f"{r1['reservation_id']} and {r2['reservation_id']}. Pay with {card_words(pay)}. "
            "You want to know the total fee for both.",
            "Hi, I want to add bags to two of my bookings.",
            {
                "user_id": user["user_id"],
                "reservation_ids": f"{r1['reservation_id']}, {r2['reservation_id']}",
            },
            gold,
            [_money(cost)],
        )
        yield


def t_cancel_and_book(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: _cancel_ok("recent")(b, r))[:n]:
        user = b.db["users"][res["user_id"]]
        words, gold, total = _booking(b, user, card(user), False, 0)
        b.claim(res["reservation_id"], res["user_id"])
        b.add(
            "multi_write",
            f"You booked reservation {res['reservation_id']} yesterday by mistake and want it "
            f"cancelled. Then: {words}",
            "Hi, I booked the wrong trip yesterday. Can you help me fix it?",
            _known(res, reason="booked by mistake"),
            [
                *_lookup(res),
                *_statuses(res),
                A("cancel_booking", reservation_id=res["reservation_id"]),
                *gold,
            ],
            [_money(paid(res)), _money(total)],
        )
        yield


def t_fix_and_bags(b: _Builder, n: int) -> Iterator[None]:
    for res in _bag_candidates(b)[:n]:
        pax, words = _fixed_passengers(b, res)
        pay = card(b.db["users"][res["user_id"]])
        bags, cost = _add_bags(b, res, 2, pay)
        b.claim(res["reservation_id"], res["user_id"])
        rid = res["reservation_id"]
        b.add(
            "multi_write",
            f"On reservation {rid}: {words} You also want to add two checked bags, paying any "
            f"fee with {card_words(pay)}.",
            "Hi, I have two things to sort out on a booking.",
            _known(res, payment=card_words(pay)),
            [
                *_lookup(res),
                A("change_booking_passengers", reservation_id=rid, passengers=pax),
                bags,
            ],
            [_money(cost)],
        )
        yield


def t_upgrade_and_bags(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: _upgrade_ok(b, r))[:n]:
        pay = card(b.db["users"][res["user_id"]])
        gold, diff = _upgrade(b, res, pay)
        bags, _ = _add_bags(b, {**res, "cabin": "business"}, 1, pay)
        b.claim(res["reservation_id"], res["user_id"])
        b.add(
            "multi_write",
            f"You want to upgrade reservation {res['reservation_id']} to business class, then "
            f"add one checked bag. Pay everything with {card_words(pay)}.",
            "Hi, I'd like to upgrade my trip and add a bag.",
            _known(res, payment=card_words(pay)),
            [*_lookup(res), *gold, bags],
            [_money(diff)],
        )
        yield


# --- refusal templates ---


def _refuse(
    b: _Builder,
    res: dict,
    instructions: str,
    opening: str,
    reason: str,
    keyword: str,
    cancellation: bool = False,
) -> None:
    b.claim(res["reservation_id"], res["user_id"])
    b.add(
        "refusal",
        instructions + " If the agent refuses and explains why, accept it and end the chat.",
        opening,
        _known(res),
        [*_lookup(res), *(_statuses(res) if cancellation else [])],
        [keyword],
        refusal=reason,
    )


def t_refuse_cancel(b: _Builder, n: int) -> Iterator[None]:
    def ok(r: dict) -> bool:
        return (
            not flown(b.db, r)
            and not recent(r)
            and not r["insurance"]
            and r["cabin"] != "business"
            and not airline_cancelled(b.db, r)
        )

    for res in b.reservations(ok)[:n]:
        _refuse(
            b,
            res,
            f"You want to cancel reservation {res['reservation_id']} because your plans "
            "changed, and get a refund.",
            "Hi, I want to cancel my reservation and get my money back.",
            "booked more than 24 hours ago, not business, no insurance, no airline cancellation",
            "24 hour",
            cancellation=True,
        )
        yield


def t_refuse_insurance_reason(b: _Builder, n: int) -> Iterator[None]:
    def ok(r: dict) -> bool:
        return _cancel_ok("insurance")(b, r) and not airline_cancelled(b.db, r) and not recent(r)

    for res in b.reservations(ok)[:n]:
        _refuse(
            b,
            res,
            f"You want to cancel reservation {res['reservation_id']} because of a work "
            "conflict. You bought travel insurance, so you expect a refund.",
            "Hello, I need to cancel a booking. I have insurance on it.",
            "insurance covers illness or a family emergency, not work",
            "illness",
            cancellation=True,
        )
        yield


def t_refuse_basic_change(b: _Builder, n: int) -> Iterator[None]:
    def ok(r: dict) -> bool:
        return (
            r["cabin"] == "basic_economy" and not flown(b.db, r) and r["flights"][0]["date"] > TODAY
        )

    for res in b.reservations(ok)[:n]:
        seg = res["flights"][0]
        later = (date.fromisoformat(seg["date"]) + timedelta(days=1)).isoformat()
        _refuse(
            b,
            res,
            f"You want to move your flight {seg['flight_number']} on reservation "
            f"{res['reservation_id']} to the next day, {say_date(later)}. You do not want to "
            "upgrade the cabin.",
            "Hi, I need to change the date of my flight.",
            "flights of basic economy reservations cannot be changed",
            "basic economy",
        )
        yield


def t_refuse_add_insurance(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: not r["insurance"] and not flown(b.db, r))[:n]:
        _refuse(
            b,
            res,
            f"You want to add travel insurance to your existing reservation "
            f"{res['reservation_id']}.",
            "Hi, can I add travel insurance to my booking?",
            "insurance can only be bought when booking",
            "booking",
        )
        yield


def t_refuse_remove_bags(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: r["total_baggages"] >= 2 and not flown(b.db, r))[:n]:
        _refuse(
            b,
            res,
            f"You checked too many bags on reservation {res['reservation_id']}: you want to "
            "remove one of them and get the fee back.",
            "Hello, I want to remove a checked bag from my reservation.",
            "checked bags can be added but never removed",
            "remove",
        )
        yield


def t_refuse_add_passenger(b: _Builder, n: int) -> Iterator[None]:
    for res in b.reservations(lambda r: len(r["passengers"]) < 5 and not flown(b.db, r))[:n]:
        _refuse(
            b,
            res,
            f"You want to add your friend Sam Rivera (born 1990-04-02) as an extra passenger on "
            f"reservation {res['reservation_id']}.",
            "Hi, I'd like to add one more person to my booking.",
            "the number of passengers cannot change",
            "passenger",
        )
        yield


def t_refuse_compensation(b: _Builder, n: int) -> Iterator[None]:
    def ok(r: dict) -> bool:
        user = b.db["users"][r["user_id"]]
        return (
            user["membership"] == "regular"
            and not r["insurance"]
            and r["cabin"] != "business"
            and bool(airline_cancelled(b.db, r))
        )

    for res in b.reservations(ok)[:n]:
        seg = airline_cancelled(b.db, res)[0]
        _refuse(
            b,
            res,
            f"Your flight {seg['flight_number']} on {say_date(seg['date'])} (reservation "
            f"{res['reservation_id']}) was cancelled by Skyline Air. You ask for "
            "compensation. You do not want to change or cancel anything.",
            "My flight was cancelled. I want compensation.",
            "regular members without insurance or business cabin get no compensation",
            "regular",
        )
        yield


# Order and counts are part of the data version: changing them renumbers tasks.
TEMPLATES: list[tuple[Callable[[_Builder, int], Iterator[None]], int]] = [
    (t_flight_status, 3),
    (t_total_paid, 3),
    (t_gift_balance, 3),
    (t_cheapest_flight, 3),
    (t_cancel("recent"), 2),
    (t_cancel("business"), 2),
    (t_cancel("insurance"), 2),
    (t_cancel("airline"), 2),
    (t_add_bags, 3),
    (t_fix_passenger, 2),
    (t_book, 3),
    (t_upgrade, 2),
    (t_change_date, 2),
    (t_compensation, 2),
    (t_cancel_and_compensate, 2),
    (t_bags_two, 2),
    (t_cancel_and_book, 2),
    (t_fix_and_bags, 2),
    (t_upgrade_and_bags, 2),
    (t_refuse_cancel, 2),
    (t_refuse_insurance_reason, 2),
    (t_refuse_basic_change, 2),
    (t_refuse_add_insurance, 2),
    (t_refuse_remove_bags, 2),
    (t_refuse_add_passenger, 2),
    (t_refuse_compensation, 2),
]


# Templates whose candidates are scarce pick first; ids still follow TEMPLATES order.
PICK_FIRST = (t_cancel_and_compensate, t_cancel_and_book, t_refuse_compensation)


def build_tasks() -> list[Task]:
    b = _Builder()
    order = sorted(range(len(TEMPLATES)), key=lambda i: TEMPLATES[i][0] not in PICK_FIRST)
    made: dict[int, list[Task]] = {}
    for i in order:
        template, n = TEMPLATES[i]
        start = len(b.tasks)
        for _ in template(b, n):
            pass
        made[i] = b.tasks[start:]
        if len(made[i]) != n:
            raise AssertionError(f"template {template.__name__} made {len(made[i])} of {n} tasks")
    ordered = [t for i in range(len(TEMPLATES)) for t in made[i]]
    return [replace(t, id=f"airline/{k:03d}") for k, t in enumerate(ordered)]
