"""τ²-bench's telecom domain (dual control), written for agentload.

The agent works the carrier's back office (customers, lines, bills, plans, devices); the user
holds a simulated phone and acts on it with their own tools. After every call the world
brings the phone's surroundings in step with the back office (line active, roaming allowed,
data cap reached, payment requests), as τ²'s `TelecomEnvironment.sync_tools` does.

Both databases are plain dicts in the shape τ²'s models dump to: enums as their values,
dates as `str(date)` and datetimes as `str(datetime)` (what τ²'s hash and JSON output write
for them). Like τ², state assignments are not re-validated, so a value an action stores is
kept as given (an int stays an int).
"""

from __future__ import annotations

import uuid
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from agentload.domains.tau2.toolkit import Record, ToolError, ToolKit, World, load_json_db, tool

TODAY = date(2025, 2, 25)
"""τ²'s fixed "today" for the telecom domain."""

# --------------------------------------------------------------------------------------
# Tool schemas (what τ² shows the model, byte for byte)


def _obj(props: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict:
    out: dict[str, Any] = dict(extra)
    out["properties"] = props
    if required:
        out["required"] = required
    out["title"] = "parameters"
    out["type"] = "object"
    return out


def _s(title: str, description: str | None = None, kind: str = "string") -> dict[str, Any]:
    p: dict[str, Any] = {}
    if description is not None:
        p["description"] = description
    p["title"] = title
    p["type"] = kind
    return p


_OWNER = "ID of the customer who owns the line."


def _line_args(line_desc: str) -> dict[str, Any]:
    return _obj(
        {"customer_id": _s("Customer Id", _OWNER), "line_id": _s("Line Id", line_desc)},
        ["customer_id", "line_id"],
    )


def _no_args() -> dict[str, Any]:
    return _obj({})


_APN_DEFS = {
    "APNNames": {"enum": ["internet", "broken"], "title": "APNNames", "type": "string"},
    "APNSettings": {
        "additionalProperties": False,
        "description": "Represents the configuration for a single Access Point Name (APN).",
        "properties": {
            "apn_name": {
                "$ref": "#/$defs/APNNames",
                "default": "internet",
                "description": "The name identifier for the APN connection.",
            },
            "reset_at_reboot": {
                "default": False,
                "description": "Whether the APN settings will be reset at the next reboot.",
                "title": "Reset At Reboot",
                "type": "boolean",
            },
            "mms_apn": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": "mms",
                "description": "Specific APN name used for MMS traffic, if different from "
                "general data.",
                "title": "Mms Apn",
            },
            "mmsc_url": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": "http://mms.carrier.com/mms/wapenc",
                "description": "The URL of the Multimedia Messaging Service Center (MMSC). "
                "Crucial for MMS.",
                "title": "Mmsc Url",
            },
            "mms_proxy": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "description": "The proxy server address required for MMS traffic on some "
                "networks.",
                "title": "Mms Proxy",
            },
            "mms_port": {
                "anyOf": [{"type": "integer"}, {"type": "null"}],
                "default": None,
                "description": "The proxy server port required for MMS traffic on some networks.",
                "title": "Mms Port",
            },
        },
        "title": "APNSettings",
        "type": "object",
    },
}

_MODE_DEFS = {
    "NetworkModePreference": {
        "enum": ["4g_5g_preferred", "4g_only", "3g_only", "2g_only"],
        "title": "NetworkModePreference",
        "type": "string",
    }
}

# --------------------------------------------------------------------------------------
# Database shapes


def _dt(v: Any) -> Any:
    """A datetime field as τ² dumps it (str of the parsed datetime)."""
    if isinstance(v, str):
        return str(datetime.fromisoformat(v))
    return v if v is None else str(v)


def _d(v: Any) -> Any:
    """A date field as τ² dumps it."""
    if isinstance(v, str):
        return str(date.fromisoformat(v))
    return v if v is None else str(v)


def _f(v: Any) -> Any:
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


def _shape(row: dict[str, Any], fields: tuple[tuple[str, Any, Any], ...], what: str) -> dict:
    """`row` with the model's fields in order, defaults filled, values converted; unknown
    keys refused (τ²'s models forbid extras)."""
    extra = set(row) - {name for name, _, _ in fields}
    if extra:
        raise ValueError(f"{what}: unexpected fields {sorted(extra)}")
    out: dict[str, Any] = {}
    for name, default, conv in fields:
        if name in row:
            v = row[name]
            out[name] = conv(v) if conv is not None and v is not None else v
        elif default is _REQUIRED:
            raise ValueError(f"{what}: field {name!r} is required")
        else:
            out[name] = default() if callable(default) else default
    return out


_REQUIRED = object()
_R = _REQUIRED

_PLAN = (
    ("plan_id", _R, None),
    ("name", _R, None),
    ("data_limit_gb", _R, _f),
    ("price_per_month", _R, _f),
    ("data_refueling_price_per_gb", _R, _f),
)
_DEVICE = (
    ("device_id", _R, None),
    ("device_type", _R, None),
    ("model", _R, None),
    ("imei", None, None),
    ("is_esim_capable", _R, None),
    ("activated", False, None),
    ("activation_date", None, _dt),
    ("last_esim_transfer_date", None, _dt),
)
_LINE = (
    ("line_id", _R, None),
    ("phone_number", _R, None),
    ("status", "Pending Activation", None),
    ("plan_id", _R, None),
    ("device_id", None, None),
    ("data_used_gb", 0.0, _f),
    ("data_refueling_gb", 0.0, _f),
    ("roaming_enabled", False, None),
    ("contract_end_date", None, _d),
    ("last_plan_change_date", None, _d),
    ("last_sim_replacement_date", None, _d),
    ("suspension_start_date", None, _d),
)
_LINE_ITEM = (
    ("description", _R, None),
    ("amount", _R, _f),
    ("date", _R, _d),
    ("item_type", _R, None),
)
_ADDRESS = (("street", _R, None), ("city", _R, None), ("state", _R, None), ("zip_code", _R, None))
_PAYMENT_METHOD = (
    ("method_type", _R, None),
    ("account_number_last_4", _R, None),
    ("expiration_date", _R, None),
)


def _bill(row: dict[str, Any]) -> dict[str, Any]:
    fields = (
        ("bill_id", _R, None),
        ("customer_id", _R, None),
        ("period_start", _R, _d),
        ("period_end", _R, _d),
        ("issue_date", _R, _d),
        ("total_due", _R, _f),
        ("due_date", _R, _d),
        ("line_items", list, lambda v: [_shape(i, _LINE_ITEM, "LineItem") for i in v]),
        ("status", "Draft", None),
    )
    return _shape(row, fields, "Bill")


def _customer(row: dict[str, Any]) -> dict[str, Any]:
    fields = (
        ("customer_id", _R, None),
        ("full_name", _R, None),
        ("date_of_birth", _R, None),
        ("email", _R, None),
        ("phone_number", _R, None),
        ("address", _R, lambda v: _shape(v, _ADDRESS, "Address")),
        ("account_status", "Pending Verification", None),
        (
            "payment_methods",
            list,
            lambda v: [_shape(p, _PAYMENT_METHOD, "PaymentMethod") for p in v],
        ),
        ("line_ids", list, list),
        ("bill_ids", list, list),
        # τ²'s default here is a date (not validated), so it dumps without a time.
        ("created_at", "2025-01-01", _dt),
        ("last_extension_date", None, _d),
        ("goodwill_credit_used_this_year", 0.0, _f),
    )
    return _shape(row, fields, "Customer")


def normalize_agent_db(db: dict[str, Any]) -> dict[str, Any]:
    """The back-office database in the shape of τ²'s `TelecomDB.model_dump()`."""
    fields = (
        ("plans", list, lambda v: [_shape(p, _PLAN, "Plan") for p in v]),
        ("customers", list, lambda v: [_customer(c) for c in v]),
        ("lines", list, lambda v: [_shape(x, _LINE, "Line") for x in v]),
        ("bills", list, lambda v: [_bill(b) for b in v]),
        ("devices", list, lambda v: [_shape(d, _DEVICE, "Device") for d in v]),
    )
    return _shape(db, fields, "TelecomDB")


def _default_apn() -> dict[str, Any]:
    return {
        "apn_name": "internet",
        "reset_at_reboot": False,
        "mms_apn": "mms",
        "mmsc_url": "http://mms.carrier.com/mms/wapenc",
        "mms_proxy": None,
        "mms_port": None,
    }


def _default_apps() -> dict[str, Any]:
    return {
        "messaging": {
            "app_name": "messaging",
            "permissions": {"sms": True, "storage": True, "phone": True, "network": False},
        },
        "browser": {
            "app_name": "browser",
            "permissions": {"sms": False, "storage": True, "phone": False, "network": True},
        },
    }


_PERMISSIONS = tuple((k, False, None) for k in ("sms", "storage", "phone", "network"))


def _app(row: dict[str, Any]) -> dict[str, Any]:
    fields = (
        ("app_name", _R, None),
        (
            "permissions",
            lambda: {"sms": False, "storage": False, "phone": False, "network": False},
            lambda v: _shape(v, _PERMISSIONS, "AppPermissions"),
        ),
    )
    return _shape(row, fields, "AppStatus")


_APN = tuple((k, v, None) for k, v in _default_apn().items())
_VPN: tuple[tuple[str, Any, Any], ...] = (
    ("server_address", None, None),
    ("protocol", None, None),
    ("server_performance", "unknown", None),
)
_DEVICE_STATE = (
    ("sim_card_status", "active", None),
    ("sim_card_missing", False, None),
    ("airplane_mode", False, None),
    ("network_signal_strength", "good", None),
    ("network_technology_connected", "5G", None),
    ("network_connection_status", "connected", None),
    ("battery_level", 80, None),
    ("data_enabled", True, None),
    ("roaming_enabled", False, None),
    ("network_mode_preference", "4g_5g_preferred", None),
    ("active_apn_settings", _default_apn, lambda v: _shape(v, _APN, "APNSettings")),
    ("wifi_enabled", False, None),
    ("wifi_connected", False, None),
    ("wifi_ssid", None, None),
    ("wifi_signal_strength", "none", None),
    ("wifi_calling_enabled", False, None),
    ("wifi_calling_mms_over_wifi", False, None),
    ("data_saver_mode", False, None),
    ("vpn_enabled_setting", False, None),
    ("vpn_connected", False, None),
    ("vpn_details", None, lambda v: _shape(v, _VPN, "VpnDetails")),
    ("app_statuses", _default_apps, lambda v: {k: _app(a) for k, a in v.items()}),
)


def _default_signal() -> dict[str, str]:
    return {"2G": "poor", "3G": "fair", "4G": "good", "5G": "excellent"}


_SURROUNDINGS = (
    ("name", None, None),
    ("phone_number", None, None),
    ("is_abroad", False, None),
    ("roaming_allowed", False, None),
    ("signal_strength", _default_signal, dict),
    ("mobile_data_usage_exceeded", False, None),
    ("line_active", True, None),
    (
        "payment_request",
        None,
        lambda v: _shape(
            v, (("bill_id", _R, None), ("amount_due", _R, _f), ("paid", False, None)), "Payment"
        ),
    ),
)


def normalize_user_db(db: dict[str, Any]) -> dict[str, Any]:
    """The phone and its surroundings in the shape of τ²'s `TelecomUserDB.model_dump()`."""
    fields = (
        ("device", dict, lambda v: _shape(v, _DEVICE_STATE, "MockPhoneAttributes")),
        ("surroundings", dict, lambda v: _shape(v, _SURROUNDINGS, "UserSurroundings")),
    )
    out = _shape(db, fields, "TelecomUserDB")
    if not out["device"]:
        out["device"] = _shape({}, _DEVICE_STATE, "MockPhoneAttributes")
    if not out["surroundings"]:
        out["surroundings"] = _shape({}, _SURROUNDINGS, "UserSurroundings")
    return out


# --------------------------------------------------------------------------------------
# The agent's tools


def _first_of_next_month(d: date) -> date:
    return (d.replace(day=1) + timedelta(days=32)).replace(day=1)


class TelecomTools(ToolKit):
    """The carrier's back-office tools, over the agent database."""

    def normalize(self, db: dict[str, Any]) -> dict[str, Any]:
        return normalize_agent_db(db)

    # -- lookups (τ²'s error texts) --

    def _line_by_id(self, line_id: str) -> dict[str, Any]:
        for line in self.db["lines"]:
            if line["line_id"] == line_id:
                return line
        raise ToolError(f"Line with ID {line_id} not found")

    def _line_by_phone(self, phone_number: str) -> dict[str, Any]:
        for line in self.db["lines"]:
            if line["phone_number"] == phone_number:
                return line
        raise ToolError(f"Line with phone number {phone_number} not found")

    def _plan(self, plan_id: str) -> dict[str, Any]:
        for plan in self.db["plans"]:
            if plan["plan_id"] == plan_id:
                return plan
        raise ToolError(f"Plan with ID {plan_id} not found")

    def _device(self, device_id: str) -> dict[str, Any]:
        for device in self.db["devices"]:
            if device["device_id"] == device_id:
                return device
        raise ToolError(f"Device with ID {device_id} not found")

    def _bill(self, bill_id: str) -> dict[str, Any]:
        for bill in self.db["bills"]:
            if bill["bill_id"] == bill_id:
                return bill
        raise ToolError(f"Bill with ID {bill_id} not found")

    def _customer(self, customer_id: str) -> dict[str, Any]:
        for customer in self.db["customers"]:
            if customer["customer_id"] == customer_id:
                return customer
        raise ToolError(f"Customer with ID {customer_id} not found")

    def _customer_by_phone(self, phone_number: str) -> dict[str, Any]:
        for customer in self.db["customers"]:
            if customer["phone_number"] == phone_number:
                return customer
            for line_id in customer["line_ids"]:
                if self._line_by_id(line_id)["phone_number"] == phone_number:
                    return customer
        raise ToolError(f"Customer with phone number {phone_number} not found")

    def _owned_line(self, customer_id: str, line_id: str) -> dict[str, Any]:
        customer = self._customer(customer_id)
        if line_id not in customer["line_ids"]:
            raise ToolError(f"Line {line_id} not found for customer {customer_id}")
        return self._line_by_id(line_id)

    def _awaiting_payment(self, customer: dict[str, Any]) -> list[dict[str, Any]]:
        bills = (self._bill(b) for b in customer["bill_ids"])
        return [b for b in bills if b["status"] == "Awaiting Payment"]

    def _charge(self, customer_id: str, amount: float, description: str) -> None:
        """Add a charge (or credit) to the customer's draft bill, opening one for next
        month when there is none (τ² names it with a random id)."""
        customer = self._customer(customer_id)
        draft = None
        for bill_id in customer["bill_ids"]:
            bill = self._bill(bill_id)
            if bill["status"] == "Draft":
                draft = bill
                break
        if draft is None:
            start = _first_of_next_month(TODAY)
            draft = {
                "bill_id": f"B{uuid.uuid4().hex[:8]}",
                "customer_id": customer_id,
                "period_start": str(start),
                "period_end": str(_first_of_next_month(start) - timedelta(days=1)),
                "issue_date": str(start),
                "total_due": 0.0,
                "due_date": str(start + timedelta(days=14)),
                "line_items": [],
                "status": "Draft",
            }
            self.db["bills"].append(draft)
            customer["bill_ids"].append(draft["bill_id"])
        draft["line_items"].append(
            {
                "description": description,
                "amount": _f(amount),
                "date": str(TODAY),
                "item_type": "Credit" if amount < 0 else "Charge",
            }
        )
        draft["total_due"] += amount

    # -- tools, in τ²'s order --

    @tool(
        "read",
        description="Finds a customer by their primary contact or line phone number.",
        parameters=_obj(
            {"phone_number": _s("Phone Number", "The phone number to search for.")},
            ["phone_number"],
        ),
    )
    def get_customer_by_phone(self, phone_number: str) -> Record:
        return Record(self._customer_by_phone(phone_number))

    @tool(
        "read",
        description="Retrieves a customer directly by their unique ID.",
        parameters=_obj(
            {"customer_id": _s("Customer Id", "The unique identifier of the customer.")},
            ["customer_id"],
        ),
    )
    def get_customer_by_id(self, customer_id: str) -> Record:
        return Record(self._customer(customer_id))

    @tool(
        "read",
        description="Searches for customers by name and DOB. May return multiple matches if "
        "names are similar,\n\nDOB helps disambiguate.",
        parameters=_obj(
            {
                "full_name": _s("Full Name", "The full name of the customer."),
                "dob": _s("Dob", "Date of birth for verification, in the format YYYY-MM-DD."),
            },
            ["full_name", "dob"],
        ),
    )
    def get_customer_by_name(self, full_name: str, dob: str) -> list[Record]:
        wanted = full_name.lower()
        return [
            Record(c)
            for c in self.db["customers"]
            if c["full_name"].lower() == wanted and c["date_of_birth"] == dob
        ]

    @tool(
        "read",
        description="Retrieves the details for a given ID.\n\nThe ID must be a valid ID for a "
        "Customer, Line, Device, Bill, or Plan.",
        parameters=_obj({"id": _s("Id", "The ID of the object to retrieve.")}, ["id"]),
    )
    def get_details_by_id(self, id: str) -> Record:
        if id.startswith("L"):
            return Record(self._line_by_id(id))
        if id.startswith("D"):
            return Record(self._device(id))
        if id.startswith("B"):
            return Record(self._bill(id))
        if id.startswith("C"):
            return Record(self._customer(id))
        if id.startswith("P"):
            return Record(self._plan(id))
        raise ToolError(f"Unknown ID format or type: {id}")

    @tool(
        "write",
        description="Suspends a specific line (max 6 months).\n\nChecks: Line status must be "
        "Active.\nLogic: Sets line status to Suspended, records suspension_start_date.",
        parameters=_obj(
            {
                "customer_id": _s("Customer Id", _OWNER),
                "line_id": _s("Line Id", "ID of the line to suspend."),
                "reason": _s("Reason", "Reason for suspension."),
            },
            ["customer_id", "line_id", "reason"],
        ),
    )
    def suspend_line(self, customer_id: str, line_id: str, reason: str) -> dict[str, Any]:
        line = self._owned_line(customer_id, line_id)
        if line["status"] != "Active":
            raise ToolError("Line must be active to suspend")
        line["status"] = "Suspended"
        line["suspension_start_date"] = str(TODAY)
        return {
            "message": "Line suspended successfully. $5/month holding fee will apply.",
            "line": Record(line),
        }

    @tool(
        "write",
        description="Resumes a suspended line.\n\nChecks: Line status must be Suspended or "
        "Pending Activation.\nLogic: Sets line status to Active, clears suspension_start_date.",
        parameters=_line_args("ID of the line to resume."),
    )
    def resume_line(self, customer_id: str, line_id: str) -> dict[str, Any]:
        line = self._owned_line(customer_id, line_id)
        if line["status"] not in ("Suspended", "Pending Activation"):
            raise ToolError("Line must be suspended to resume")
        line["status"] = "Active"
        line["suspension_start_date"] = None
        return {"message": "Line resumed successfully", "line": Record(line)}

    @tool(
        "read",
        description="Retrieves a list of the customer's bills, most recent first.",
        parameters=_obj(
            {
                "customer_id": _s("Customer Id", "ID of the customer."),
                "limit": {
                    "default": 12,
                    "description": "Maximum number of bills to return.",
                    "title": "Limit",
                    "type": "integer",
                },
            },
            ["customer_id"],
        ),
    )
    def get_bills_for_customer(self, customer_id: str, limit: int = 12) -> list[Record]:
        customer = self._customer(customer_id)
        bills = [self._bill(b) for b in customer["bill_ids"]]
        # ISO date strings sort like the dates; the sort is stable as τ²'s.
        bills.sort(key=lambda b: b["issue_date"], reverse=True)
        return [Record(b) for b in bills[:limit]]

    @tool(
        "write",
        description="Sends a payment request to the customer for a specific bill.\n\nChecks:\n"
        "    - Customer exists\n    - Bill exists and belongs to the customer\n"
        "    - No other bills are already awaiting payment for this customer\n"
        "Logic: Sets bill status to AWAITING_PAYMENT and notifies customer.\n"
        "Warning: This method does not check if the bill is already PAID.\n"
        "Always check the bill status before calling this method.",
        parameters=_obj(
            {
                "customer_id": _s("Customer Id", "ID of the customer who owns the bill."),
                "bill_id": _s("Bill Id", "ID of the bill to send payment request for."),
            },
            ["customer_id", "bill_id"],
        ),
    )
    def send_payment_request(self, customer_id: str, bill_id: str) -> str:
        customer = self._customer(customer_id)
        if self._awaiting_payment(customer):
            raise ToolError("A bill is already awaiting payment for this customer")
        if bill_id not in customer["bill_ids"]:
            raise ToolError(f"Bill {bill_id} not found for customer {customer_id}")
        bill = self._bill(bill_id)
        bill["status"] = "Awaiting Payment"
        return f"Payment request sent to the customer for bill {bill['bill_id']}"

    @tool(
        "read",
        description="Retrieves current billing cycle data usage for a line, including data\n\n"
        "refueling amount, data limit, and cycle end date.",
        parameters=_line_args("ID of the line to check usage for."),
    )
    def get_data_usage(self, customer_id: str, line_id: str) -> dict[str, Any]:
        line = self._owned_line(customer_id, line_id)
        plan = self._plan(line["plan_id"])
        return {
            "line_id": line_id,
            "data_used_gb": line["data_used_gb"],
            "data_limit_gb": plan["data_limit_gb"],
            "data_refueling_gb": line["data_refueling_gb"],
            "cycle_end_date": str(_first_of_next_month(TODAY) - timedelta(days=1)),
        }

    @tool(
        "write",
        description="Enables international roaming on a line.",
        parameters=_line_args("ID of the line to enable roaming for."),
    )
    def enable_roaming(self, customer_id: str, line_id: str) -> str:
        line = self._owned_line(customer_id, line_id)
        if line["roaming_enabled"]:
            return "Roaming was already enabled"
        line["roaming_enabled"] = True
        return "Roaming enabled successfully"

    @tool(
        "write",
        description="Disables international roaming on a line.",
        parameters=_line_args("ID of the line to disable roaming for."),
    )
    def disable_roaming(self, customer_id: str, line_id: str) -> str:
        line = self._owned_line(customer_id, line_id)
        if not line["roaming_enabled"]:
            return "Roaming was already disabled"
        line["roaming_enabled"] = False
        return "Roaming disabled successfully"

    @tool(
        "generic",
        description="Transfer the user to a human agent, with a summary of the user's issue.\n\n"
        "Only transfer if\n -  the user explicitly asks for a human agent\n -  given the policy "
        "and the available tools, you cannot solve the user's issue.",
        parameters=_obj({"summary": _s("Summary", "A summary of the user's issue.")}, ["summary"]),
    )
    def transfer_to_human_agents(self, summary: str) -> str:
        return "Transfer successful"

    @tool(
        "write",
        description="Refuels data for a specific line, adding to the customer's bill.\n\n"
        "Checks: Line status must be Active, Customer owns the line.\nLogic: Adds data to the "
        "line and charges customer based on the plan's refueling rate.",
        parameters=_obj(
            {
                "customer_id": _s("Customer Id", _OWNER),
                "line_id": _s("Line Id", "ID of the line to refuel data for."),
                "gb_amount": _s("Gb Amount", "Amount of data to add in gigabytes.", "number"),
            },
            ["customer_id", "line_id", "gb_amount"],
        ),
    )
    def refuel_data(self, customer_id: str, line_id: str, gb_amount: float) -> dict[str, Any]:
        line = self._owned_line(customer_id, line_id)
        # τ² does not check that the line is active here.
        if gb_amount <= 0:
            raise ToolError("Refuel amount must be positive")
        plan = self._plan(line["plan_id"])
        rate = plan["data_refueling_price_per_gb"]
        charge = gb_amount * rate
        line["data_refueling_gb"] += gb_amount
        self._charge(customer_id, charge, f"Data refueling: {gb_amount} GB at ${rate}/GB")
        return {
            "message": f"Successfully added {gb_amount} GB of data for line {line_id} "
            f"for ${charge:.2f}",
            "new_data_refueling_gb": line["data_refueling_gb"],
            "charge": charge,
        }

    # -- functions tasks name (initialization and assertions) --

    def get_available_plan_ids(self) -> list[str]:
        return [p["plan_id"] for p in self.db["plans"]]

    def set_data_usage(self, customer_id: str, line_id: str, data_used_gb: float) -> str:
        line = self._owned_line(customer_id, line_id)
        line["data_used_gb"] = data_used_gb
        return f"Data usage set to {data_used_gb} GB for line {line_id}"

    def suspend_line_for_overdue_bill(
        self, customer_id: str, line_id: str, new_bill_id: str, contract_ended: bool
    ) -> str:
        """Suspend an active line for last month's unpaid plan charge (a new overdue bill)."""
        line = self._line_by_id(line_id)
        if line["status"] != "Active":
            raise ToolError("Line must be active to suspend for unpaid bill")
        amount = self._plan(line["plan_id"])["price_per_month"]
        if amount <= 0:
            raise ToolError("Amount must be positive for overdue bill")
        customer = self._customer(customer_id)
        if any(self._bill(b)["status"] == "Overdue" for b in customer["bill_ids"]):
            raise ToolError("Customer already has an overdue bill")
        last_month_end = TODAY.replace(day=1) - timedelta(days=1)
        last_month_start = last_month_end.replace(day=1)
        item = {
            "description": f"Charge for line {line['line_id']}",
            "amount": _f(amount),
            "date": str(TODAY),
            "item_type": "Charge" if amount > 0 else "Credit",
        }
        self.db["bills"].append(
            {
                "bill_id": new_bill_id,
                "customer_id": customer_id,
                "period_start": str(last_month_start),
                "period_end": str(last_month_end),
                "issue_date": str(last_month_start),
                "total_due": 0.0 + amount,
                "due_date": str(last_month_start + timedelta(days=14)),
                "line_items": [item],
                "status": "Overdue",
            }
        )
        customer["bill_ids"].append(new_bill_id)
        line["status"] = "Suspended"
        line["suspension_start_date"] = str(TODAY)
        if contract_ended:
            line["contract_end_date"] = str(last_month_end)
        return (
            f"Line {line_id} suspended for unpaid bill {new_bill_id}. "
            f"Contract ended: {contract_ended}"
        )

    def assert_data_refueling_amount(
        self, customer_id: str, line_id: str, expected_amount: float
    ) -> bool:
        line = self._owned_line(customer_id, line_id)
        return abs(line["data_refueling_gb"] - expected_amount) < 1e-6

    def assert_line_status(self, customer_id: str, line_id: str, expected_status: str) -> bool:
        return self._owned_line(customer_id, line_id)["status"] == expected_status

    def assert_overdue_bill_exists(self, customer_id: str, overdue_bill_id: str) -> bool:
        customer = self._customer(customer_id)
        if overdue_bill_id not in customer["bill_ids"]:
            raise ToolError(f"Overdue bill {overdue_bill_id} not found")
        if self._bill(overdue_bill_id)["status"] != "Overdue":
            raise ToolError(f"Overdue bill {overdue_bill_id} is not overdue")
        return True

    def assert_no_overdue_bill(self, overdue_bill_id: str) -> bool:
        """True when the bill is gone or paid."""
        try:
            bill = self._bill(overdue_bill_id)
        except ToolError:
            return True
        return bool(bill["status"] == "Paid")


# --------------------------------------------------------------------------------------
# The user's phone


_SIGNAL_ICONS = {
    "none": "📵 No Signal",
    "poor": "📶¹ Poor",
    "fair": "📶² Fair",
    "good": "📶³ Good",
    "excellent": "📶⁴ Excellent",
}
_TECH_SPEED = {"2G": (0.1, 0.4), "3G": (1.0, 5.0), "4G": (10.0, 100.0), "5G": (50.0, 500.0)}
_SIGNAL_FACTOR = {"poor": 0.2, "fair": 0.5, "good": 0.8, "excellent": 1.0}
_SPEED_ADVICE = {
    "Very Poor": "Connection is very slow. Basic web browsing might be difficult.",
    "Poor": "Connection is slow. Web browsing may be sluggish, streaming difficult.",
    "Fair": "Connection is okay for web browsing and some standard definition streaming.",
    "Good": "Connection is good for most activities, including HD streaming.",
    "Excellent": "Connection is very fast.",
}
_MODE_TECH = {"4g_only": "4G", "3g_only": "3G", "2g_only": "2G"}
_MODES = ("4g_5g_preferred", "4g_only", "3g_only", "2g_only")
_SIM_TEXT = {
    "active": "Your SIM card is active and working.",
    "missing": "No SIM card detected in the phone.",
    "locked_pin": "The SIM card is locked with a PIN code.",
    "locked_puk": "The SIM card is locked with a PUK code.",
}
_PERF_NAMES = {
    "unknown": "UNKNOWN",
    "poor": "POOR",
    "fair": "FAIR",
    "good": "GOOD",
    "excellent": "EXCELLENT",
}


def _attr(obj: Any, name: str) -> Any:
    """Field `name` of a stored sub-model. τ² stores whatever a bad call assigned (e.g. a
    string for the APN settings) and later fails on attribute access; say it the same way."""
    if isinstance(obj, dict):
        return obj[name]
    raise AttributeError(f"'{type(obj).__name__}' object has no attribute '{name}'")


def _value(v: Any) -> str:
    """An enum field's `.value` (a raw non-string stored by a bad call has none)."""
    if isinstance(v, str):
        return v
    raise AttributeError(f"'{type(v).__name__}' object has no attribute 'value'")


# pydantic's rendering of one validation error, for set_apn_settings' dict input.
_PYDANTIC_URL = "https://errors.pydantic.dev/2.14/v/"
_BOOL_WORDS = {
    "0": False,
    "off": False,
    "f": False,
    "false": False,
    "n": False,
    "no": False,
    "1": True,
    "on": True,
    "t": True,
    "true": True,
    "y": True,
    "yes": True,
}


def _input_repr(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 50 else f"{r[:25]}...{r[-24:]}"


def _apn_error(field: str, msg: str, kind: str, v: Any) -> str:
    return (
        f"{field}\n  {msg} [type={kind}, input_value={_input_repr(v)}, "
        f"input_type={type(v).__name__}]\n    For further information visit {_PYDANTIC_URL}{kind}"
    )


def _check_apn_field(name: str, v: Any) -> tuple[Any, str | None]:
    """(value, None) as pydantic coerces it for APNSettings, or (None, error text)."""
    if name == "apn_name":
        if isinstance(v, str) and v in ("internet", "broken"):
            return v, None
        return None, _apn_error(name, "Input should be 'internet' or 'broken'", "enum", v)
    if name == "reset_at_reboot":
        if isinstance(v, bool):
            return v, None
        if isinstance(v, str):
            if v.lower() in _BOOL_WORDS:
                return _BOOL_WORDS[v.lower()], None
        elif isinstance(v, int | float):
            if v in (0, 1):
                return bool(v), None
            if isinstance(v, float) and v != int(v):
                return None, _apn_error(name, "Input should be a valid boolean", "bool_type", v)
        else:
            return None, _apn_error(name, "Input should be a valid boolean", "bool_type", v)
        msg = "Input should be a valid boolean, unable to interpret input"
        return None, _apn_error(name, msg, "bool_parsing", v)
    if name == "mms_port":
        return _check_int(name, v)
    if v is None or isinstance(v, str):  # mms_apn, mmsc_url, mms_proxy
        return v, None
    return None, _apn_error(name, "Input should be a valid string", "string_type", v)


def _check_int(name: str, v: Any) -> tuple[Any, str | None]:
    if v is None or isinstance(v, int):
        return (v if v is None else int(v)), None
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return None, _apn_error(name, "Input should be a finite number", "finite_number", v)
        if v != int(v):
            msg = "Input should be a valid integer, got a number with a fractional part"
            return None, _apn_error(name, msg, "int_from_float", v)
        if abs(v) >= 2**63:
            msg = "Unable to parse input string as an integer, exceeded maximum size"
            return None, _apn_error(name, msg, "int_parsing_size", v)
        return int(v), None
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s), None
        except ValueError:
            head, dot, tail = s.partition(".")
            if dot and tail.strip("0") == "":
                try:
                    return int(head), None
                except ValueError:
                    pass
        msg = "Input should be a valid integer, unable to parse string as an integer"
        return None, _apn_error(name, msg, "int_parsing", v)
    return None, _apn_error(name, "Input should be a valid integer", "int_type", v)


def _apn_from_dict(given: dict[str, Any]) -> dict[str, Any]:
    """τ²'s `APNSettings(**given)`: defaults filled, values coerced, errors as pydantic's."""
    out = _default_apn()
    errors = []
    for name in out:
        if name in given:
            value, err = _check_apn_field(name, given[name])
            if err is None:
                out[name] = value
            else:
                errors.append(err)
    errors += [
        _apn_error(k, "Extra inputs are not permitted", "extra_forbidden", v)
        for k, v in given.items()
        if k not in out
    ]
    if errors:
        n = len(errors)
        head = f"{n} validation error{'s' if n > 1 else ''} for APNSettings"
        raise ToolError("\n".join([head, *errors]))
    return out


class TelecomUserTools(ToolKit):
    """The user's phone: its settings, the network it finds, and what its screens say."""

    def __init__(self, db: dict[str, Any]) -> None:
        super().__init__(db)
        # The VPN profile that connect_vpn attaches. τ² keeps one such object per process
        # and break_vpn degrades it in place (it stays degraded for later connections); here
        # that lasts for this episode only.
        self._vpn_profile: dict[str, Any] = {
            "server_address": "192.168.1.1",
            "protocol": "OpenVPN",
            "server_performance": "excellent",
        }

    def normalize(self, db: dict[str, Any]) -> dict[str, Any]:
        return normalize_user_db(db)

    @property
    def _dev(self) -> dict[str, Any]:
        return self.db["device"]

    @property
    def _env(self) -> dict[str, Any]:
        return self.db["surroundings"]

    # -- derived state --

    def _status_bar(self) -> str:
        d = self._dev
        parts = []
        if d["airplane_mode"]:
            parts.append("✈️ Airplane Mode")
        else:
            parts.append(_SIGNAL_ICONS.get(d["network_signal_strength"], "📵 No Signal"))
            tech = d["network_technology_connected"]
            if tech != "none":
                parts.append(_value(tech))
            if d["data_enabled"] and tech != "none":
                parts.append("📱 Data Enabled")
                if d["data_saver_mode"]:
                    parts.append("🔽 Data Saver")
            else:
                parts.append("📵 Data Disabled")
        if d["wifi_enabled"] and d["wifi_connected"]:
            parts.append(f"📡 Connected to {d['wifi_ssid']}" if d["wifi_ssid"] else "📡 Enabled")
        if d["vpn_connected"]:
            parts.append("🔒 VPN Connected")
        parts.append(f"🔋 {d['battery_level']}%")
        return " | ".join(parts)

    def _with_bar(self, text: str) -> str:
        return f"{text}\nStatus Bar: {self._status_bar()}"

    def _sim_status(self) -> Any:
        d = self._dev
        return "missing" if d["sim_card_missing"] else d["sim_card_status"]

    def _mobile_data_working(self) -> bool:
        d, env = self._dev, self._env
        if d["airplane_mode"] or d["network_signal_strength"] == "none":
            return False
        if d["network_connection_status"] == "no_service":
            return False
        if env["is_abroad"] and (not d["roaming_enabled"] or not env["roaming_allowed"]):
            return False
        return bool(d["data_enabled"] and not env["mobile_data_usage_exceeded"])

    def _speed(self) -> tuple[float | None, str]:
        if not self._mobile_data_working():
            return None, "No Connection"
        d = self._dev
        vpn = d["vpn_details"]
        factor = 1.0
        if d["vpn_connected"] and vpn and _attr(vpn, "server_performance") == "poor":
            factor = 0.1
        if d["data_saver_mode"]:
            factor *= 0.2
        low, high = _TECH_SPEED.get(d["network_technology_connected"], (0.0, 0.0))
        signal = _SIGNAL_FACTOR.get(d["network_signal_strength"], 0.0)
        speed = round((low + high) / 2.0 * signal * factor, 2)
        if speed < 1:
            return speed, "Very Poor"
        if speed < 5:
            return speed, "Poor"
        if speed < 25:
            return speed, "Fair"
        if speed < 100:
            return speed, "Good"
        return speed, "Excellent"

    def _mms_ok(self) -> Any:
        d = self._dev
        if not self._mobile_data_working() or d["network_technology_connected"] == "2G":
            return False
        if d["wifi_calling_enabled"] and d["wifi_calling_mms_over_wifi"]:
            return False  # the carrier does not carry MMS over Wi-Fi calling
        if _attr(d["active_apn_settings"], "mmsc_url") is None:
            return False
        app = d["app_statuses"].get("messaging")
        if app is None:
            return False
        return app["permissions"]["storage"] and app["permissions"]["sms"]

    def simulate_network_search(self) -> None:
        """Re-derive the cellular connection from the SIM, the mode preference and the
        signal around the user; then airplane mode, a broken APN or an inactive line cut it."""
        d, env = self._dev, self._env
        if self._sim_status() == "active":
            d["network_connection_status"] = "connected"
            pref = d["network_mode_preference"]
            signal = env["signal_strength"]
            tech = _MODE_TECH.get(pref, "4G") if isinstance(pref, str) else "4G"
            if pref == "4g_5g_preferred":
                tech = "4G" if signal.get("5G", "none") == "none" else "5G"
            d["network_technology_connected"] = tech
            d["network_signal_strength"] = signal.get(tech, "none")
        else:
            self._no_service()
        if d["airplane_mode"]:
            self._no_service()
        if _attr(d["active_apn_settings"], "apn_name") == "broken":
            self._no_service()
        if not env["line_active"]:
            self._no_service()

    def _no_service(self) -> None:
        d = self._dev
        d["network_connection_status"] = "no_service"
        d["network_technology_connected"] = "none"
        d["network_signal_strength"] = "none"

    def _toggle_airplane(self) -> Any:
        d = self._dev
        was_on = d["airplane_mode"]
        d["airplane_mode"] = not was_on
        if was_on:
            d["network_connection_status"] = "searching"
        if not was_on or d["wifi_enabled"]:
            d["wifi_connected"] = False
            d["wifi_ssid"] = None
            d["wifi_signal_strength"] = "none"
        if not was_on and d["vpn_connected"]:
            self._drop_vpn()
        self.simulate_network_search()
        return d["airplane_mode"]

    def _toggle(self, field: str, search: bool) -> bool:
        new = not self._dev[field]
        self._dev[field] = new
        if search:
            self.simulate_network_search()
        return new

    def _drop_vpn(self) -> bool:
        d = self._dev
        if not d["vpn_connected"]:
            return False
        d["vpn_connected"] = False
        d["vpn_details"] = None
        return True

    def _app_perms_text(self, perms: dict[str, Any]) -> list[str]:
        return [name.replace("_", " ").lower() for name, on in perms.items() if on]

    # -- tools, in τ²'s order --

    @tool(
        "read",
        description="Shows what icons are currently visible in your phone's status bar (the "
        "area at the top of the screen). Displays network signal strength, mobile data status "
        "(enabled, disabled, data saver), Wi-Fi status, and battery level.",
        parameters=_no_args(),
    )
    def check_status_bar(self) -> str:
        return f"Status Bar: {self._status_bar()}"

    @tool(
        "read",
        description="Checks your phone's connection status to cellular networks and Wi-Fi. "
        "Shows airplane mode status, signal strength, network type, whether mobile data is "
        "enabled, and whether data roaming is enabled.",
        parameters=_no_args(),
    )
    def check_network_status(self) -> str:
        d = self._dev
        lines = [
            f"Airplane Mode: {'ON' if d['airplane_mode'] else 'OFF'}",
            f"SIM Card Status: {_value(self._sim_status())}",
            f"Cellular Connection: {_value(d['network_connection_status'])}",
            f"Cellular Signal: {_value(d['network_signal_strength'])}",
            f"Cellular Network Type: {_value(d['network_technology_connected'])}",
            f"Mobile Data Enabled: {'Yes' if d['data_enabled'] else 'No'}",
            f"Data Roaming Enabled: {'Yes' if d['roaming_enabled'] else 'No'}",
            f"Wi-Fi Radio: {'ON' if d['wifi_enabled'] else 'OFF'}",
            f"Wi-Fi Connected: {'Yes' if d['wifi_connected'] else 'No'}",
        ]
        if d["wifi_connected"]:
            lines.append(f"Connected Wi-Fi Network: {d['wifi_ssid']}")
        return "\n".join(lines)

    @tool(
        "read",
        description="Shows the current network mode preference.",
        parameters=_no_args(),
    )
    def check_network_mode_preference(self) -> str:
        return f"Network Mode Preference: {_value(self._dev['network_mode_preference'])}"

    @tool(
        "write",
        description="Changes the type of cellular network your phone prefers to connect to "
        "(e.g., 5G, LTE/4G, 3G). Higher-speed networks (LTE/5G) provide faster data but may "
        "use more battery.",
        parameters=_obj(
            {
                "mode": {
                    "anyOf": [{"$ref": "#/$defs/NetworkModePreference"}, {"type": "string"}],
                    "title": "Mode",
                }
            },
            ["mode"],
            **{"$defs": _MODE_DEFS},
        ),
    )
    def set_network_mode_preference(self, mode: Any) -> str:
        if isinstance(mode, str) and mode not in _MODES:
            return self._with_bar(
                f"Failed to set network mode: '{mode}' is not a valid option. "
                f"Please use one of: {', '.join(_MODES)}"
            )
        # τ² stores a non-string as given and searches; then None reads as "not valid" and
        # anything else fails on its `.value`.
        self._dev["network_mode_preference"] = mode
        self.simulate_network_search()
        if mode is None:
            return self._with_bar(
                f"Failed to set network mode: 'None' is not a valid option. "
                f"Please use one of: {', '.join(_MODES)}"
            )
        return self._with_bar(f"Preferred Network Mode set to: {_value(mode)}")

    @tool(
        "read",
        description="Measures your current internet connection speed (download speed). "
        "Provides information about connection quality and what activities it can support.",
        parameters=_no_args(),
    )
    def run_speed_test(self) -> str:
        speed, desc = self._speed()
        if speed is None:
            return f"Speed test failed: {desc or 'Could not determine speed'}."
        return f"Speed Test Result: {speed:.2f} Mbps ({desc}). {_SPEED_ADVICE.get(desc, '')}"

    @tool(
        "write",
        description="Toggles Airplane Mode ON or OFF. When ON, it disconnects all wireless "
        "communications including cellular, Wi-Fi, and Bluetooth.\n\nReturns the new state of "
        "airplane_mode.",
        parameters=_no_args(),
    )
    def toggle_airplane_mode(self) -> str:
        on = self._toggle_airplane()
        return self._with_bar(f"Airplane Mode is now {'ON' if on else 'OFF'}.")

    @tool(
        "read",
        description="Checks if your SIM card is working correctly and displays its current "
        "status. Shows if the SIM is active, missing, or locked with a PIN or PUK code.",
        parameters=_no_args(),
    )
    def check_sim_status(self) -> str:
        status = self._sim_status()
        text = _SIM_TEXT.get(status) if isinstance(status, str) else None
        return text if text is not None else f"Unknown SIM status: {_value(status)}"

    @tool(
        "write",
        description="Simulates removing and reinserting your SIM card. This can help resolve "
        "recognition issues.",
        parameters=_no_args(),
    )
    def reseat_sim_card(self) -> str:
        self._dev["sim_card_missing"] = False
        self.simulate_network_search()
        return self._with_bar("SIM card re-seated successfully.")

    @tool(
        "write",
        description="Toggles your phone's mobile data connection ON or OFF. Controls whether "
        "your phone can use cellular data for internet access when Wi-Fi is unavailable.\n\n"
        "Returns the new data connection status.",
        parameters=_no_args(),
    )
    def toggle_data(self) -> str:
        on = self._toggle("data_enabled", search=True)
        return self._with_bar(f"Mobile Data is now {'ON' if on else 'OFF'}.")

    @tool(
        "write",
        description="Toggles Data Roaming ON or OFF. When ON, your phone can use data networks "
        "in areas outside your carrier's coverage.\n\nReturns the new data roaming status.",
        parameters=_no_args(),
    )
    def toggle_roaming(self) -> str:
        on = self._toggle("roaming_enabled", search=True)
        return self._with_bar(f"Data Roaming is now {'ON' if on else 'OFF'}.")

    @tool(
        "read",
        description="Checks if your phone has any data-limiting features active. Shows if "
        "Data Saver mode is on.",
        parameters=_no_args(),
    )
    def check_data_restriction_status(self) -> str:
        if self._dev["data_saver_mode"]:
            return "Data Saver mode is ON (limits data usage)."
        return "Data Saver mode is OFF."

    @tool(
        "write",
        description="Toggles Data Saver mode ON or OFF. When ON, it reduces data usage, which "
        "may affect data speed.\n\nReturns the new data saver mode status.",
        parameters=_no_args(),
    )
    def toggle_data_saver_mode(self) -> str:
        on = self._toggle("data_saver_mode", search=False)
        return self._with_bar(f"Data Saver Mode is now {'ON' if on else 'OFF'}.")

    @tool(
        "read",
        description="Checks the technical APN settings your phone uses to connect to your "
        "carrier's mobile data network. Shows current APN name and MMSC URL for picture "
        "messaging.",
        parameters=_no_args(),
    )
    def check_apn_settings(self) -> str:
        apn = self._dev["active_apn_settings"]
        if not isinstance(apn, dict):  # τ² copies the settings model first
            raise AttributeError(f"'{type(apn).__name__}' object has no attribute 'model_copy'")
        name = _value(apn["apn_name"]) or "Not Set"
        url = _attr(apn, "mmsc_url") or "Not Set"
        return (
            f"Current APN Name: {name}\nMMSC URL (for picture messages): {url}\n"
            "(These are technical settings, usually best left unchanged.)"
        )

    @tool(
        "write",
        description="Sets the APN settings for the phone.",
        parameters=_obj(
            {
                "apn_settings": {
                    "anyOf": [
                        {"$ref": "#/$defs/APNSettings"},
                        {"additionalProperties": True, "type": "object"},
                    ],
                    "title": "Apn Settings",
                }
            },
            ["apn_settings"],
            **{"$defs": _APN_DEFS},
        ),
    )
    def set_apn_settings(self, apn_settings: Any) -> str:
        if isinstance(apn_settings, dict):
            apn_settings = _apn_from_dict(apn_settings)
        # τ² assigns a non-dict as it came, then fails reading its name.
        self._dev["active_apn_settings"] = apn_settings
        text = f"APN settings set to: {_value(_attr(apn_settings, 'apn_name'))}"
        self.simulate_network_search()
        return self._with_bar(text)

    @tool(
        "write",
        description="Resets your APN settings to the default settings.",
        parameters=_no_args(),
    )
    def reset_apn_settings(self) -> str:
        apn = self._dev["active_apn_settings"]
        _attr(apn, "reset_at_reboot")
        apn["reset_at_reboot"] = True  # takes effect at the next reboot
        self.simulate_network_search()
        return self._with_bar("APN settings will reset at reboot.")

    @tool(
        "read",
        description="Checks your Wi-Fi connection status. Shows if Wi-Fi is turned on, which "
        "network you're connected to (if any), and the signal strength.",
        parameters=_no_args(),
    )
    def check_wifi_status(self) -> str:
        d = self._dev
        if not d["wifi_enabled"]:
            return "Wi-Fi is turned OFF."
        if d["wifi_connected"]:
            return (
                f"Wi-Fi is ON and connected to '{d['wifi_ssid']}'. "
                f"Signal strength: {_value(d['wifi_signal_strength'])}."
            )
        return "Wi-Fi is ON but not connected to any network."

    @tool(
        "write",
        description="Toggles your phone's Wi-Fi radio ON or OFF. Controls whether your phone "
        "can discover and connect to wireless networks for internet access.\n\nReturns the new "
        "Wi-Fi status.",
        parameters=_no_args(),
    )
    def toggle_wifi(self) -> str:
        d = self._dev
        if d["airplane_mode"]:
            return self._with_bar("Cannot change Wi-Fi settings while Airplane Mode is ON.")
        on = not d["wifi_enabled"]
        d["wifi_enabled"] = on
        if not on:
            d["wifi_connected"] = False
            d["wifi_ssid"] = None
            d["wifi_signal_strength"] = "none"
        return self._with_bar(f"Wi-Fi is now {'ON' if on else 'OFF'}.")

    @tool(
        "read",
        description="Checks if Wi-Fi Calling is enabled on your device. This feature allows you "
        "to make and receive calls over a Wi-Fi network instead of using the cellular network.",
        parameters=_no_args(),
    )
    def check_wifi_calling_status(self) -> str:
        on = "ON" if self._dev["wifi_calling_enabled"] else "OFF"
        return f"Wi-Fi Calling is currently turned {on}."

    @tool(
        "write",
        description="Toggles Wi-Fi Calling ON or OFF. This feature allows you to make and "
        "receive calls over Wi-Fi instead of the cellular network, which can help in areas with "
        "weak cellular signal.\n\nReturns the new Wi-Fi Calling status.",
        parameters=_no_args(),
    )
    def toggle_wifi_calling(self) -> str:
        on = self._toggle("wifi_calling_enabled", search=False)
        return self._with_bar(f"Wi-Fi Calling is now {'ON' if on else 'OFF'}.")

    @tool(
        "read",
        description="Checks if you're using a VPN (Virtual Private Network) connection. Shows "
        "if a VPN is active, connected, and displays any available connection details.",
        parameters=_no_args(),
    )
    def check_vpn_status(self) -> str:
        d = self._dev
        if d["vpn_connected"]:
            vpn = d["vpn_details"]
            if vpn:
                # τ² prints the Python repr of its model dump (an enum member included).
                perf = _value(_attr(vpn, "server_performance"))
                shown = (
                    f"{{'server_address': {vpn['server_address']!r}, "
                    f"'protocol': {vpn['protocol']!r}, "
                    f"'server_performance': <PerformanceLevel.{_PERF_NAMES[perf]}: {perf!r}>}}"
                )
                return f"VPN is ON and connected. Details: {shown}"
            return "VPN is ON and connected (no specific details available)."
        if d["vpn_enabled_setting"]:
            return "VPN is turned ON in settings, but currently not connected."
        return "VPN is turned OFF."

    @tool(
        "write",
        description="Connects to your VPN (Virtual Private Network).",
        parameters=_no_args(),
    )
    def connect_vpn(self) -> str:
        d = self._dev
        if d["vpn_connected"]:
            return "VPN already connected."
        d["vpn_connected"] = True
        d["vpn_details"] = self._vpn_profile  # shared on purpose: see __init__
        return self._with_bar("VPN connected successfully.")

    @tool(
        "write",
        description="Disconnects any active VPN (Virtual Private Network) connection. Stops "
        "routing your internet traffic through a VPN server, which might affect connection "
        "speed or access to content.",
        parameters=_no_args(),
    )
    def disconnect_vpn(self) -> str:
        if self._drop_vpn():
            return self._with_bar("VPN disconnected successfully.")
        return self._with_bar("No active VPN connection to disconnect.")

    @tool(
        "read",
        description="Returns the name of all installed apps on the phone.",
        parameters=_no_args(),
    )
    def check_installed_apps(self) -> str:
        names = ", ".join(self._dev["app_statuses"])
        return f"The following apps are installed on the phone: {names}"

    @tool(
        "read",
        description="Checks detailed information about a specific app. Shows its permissions "
        "and background data usage settings.",
        parameters=_obj({"app_name": {"title": "App Name", "type": "string"}}, ["app_name"]),
    )
    def check_app_status(self, app_name: str) -> str:
        app = self._dev["app_statuses"].get(app_name)
        if app is None:
            return f"App '{app_name}' not found on this phone."
        lines = [f"Status for App: {app_name}"]
        granted = self._app_perms_text(app["permissions"])
        if granted:
            lines.append(" - Permissions Granted:")
            lines += [f"   - {p}" for p in granted]
        else:
            lines.append(" - Permissions: None granted.")
        return "\n".join(lines)

    @tool(
        "read",
        description="Checks what permissions a specific app currently has. Shows if the app has "
        "access to features like storage, camera, location, etc.",
        parameters=_obj({"app_name": {"title": "App Name", "type": "string"}}, ["app_name"]),
    )
    def check_app_permissions(self, app_name: str) -> str:
        app = self._dev["app_statuses"].get(app_name)
        if app is None:
            return f"App '{app_name}' not found on this phone."
        granted = self._app_perms_text(app["permissions"])
        if not granted:
            return f"App '{app_name}' currently has no permissions granted."
        return f"App '{app_name}' has permission for: {', '.join(granted)}."

    @tool(
        "write",
        description="Gives a specific permission to an app (like access to storage, camera, or "
        "location). Required for some app functions to work properly.",
        parameters=_obj(
            {
                "app_name": _s("App Name", "The name of the app to grant the permission to."),
                "permission": _s("Permission", "The permission to grant, should be lowercase."),
            },
            ["app_name", "permission"],
        ),
    )
    def grant_app_permission(self, app_name: str, permission: str) -> str:
        app = self._dev["app_statuses"].get(app_name)
        permission = permission.lower()
        if app is None:
            text = f"Error. App '{app_name}' not found. Cannot grant permission."
        elif permission not in app["permissions"]:
            known = list(app["permissions"])
            text = (
                f"Error. Permission '{permission}' not tracked for app '{app_name}', "
                f"available permissions: {known}"
            )
        else:
            app["permissions"][permission] = True
            text = f"Success. Permission '{permission}' granted to app '{app_name}'."
        return self._with_bar(text)

    @tool(
        "read",
        description="Checks if the default messaging app can send MMS messages.",
        parameters=_no_args(),
    )
    def can_send_mms(self) -> str:
        if self._mms_ok():
            return "Your messaging app can send MMS messages."
        return "Your messaging app cannot send MMS messages."

    @tool(
        "write",
        description="Restarts your phone completely. This can help resolve many temporary "
        "software glitches by refreshing all running services and connections.",
        parameters=_no_args(),
    )
    def reboot_device(self) -> str:
        d = self._dev
        lines = []
        if _attr(d["active_apn_settings"], "reset_at_reboot"):
            lines.append("Resetting APN settings...")
            d["active_apn_settings"] = _default_apn()
        lines.append("Restarting network services...")
        d["network_connection_status"] = "searching"
        self.simulate_network_search()
        return self._with_bar("\n".join(lines))

    @tool(
        "read",
        description="Checks if the agent has sent you a payment request.",
        parameters=_no_args(),
    )
    def check_payment_request(self) -> str:
        req = self._env["payment_request"]
        if req is None:
            return "No payment request has been made."
        return f"You have a payment request for bill {req['bill_id']} of {req['amount_due']} USD."

    @tool(
        "write",
        description="Makes a payment for the bill that the agent has sent you.",
        parameters=_no_args(),
    )
    def make_payment(self) -> str:
        req = self._env["payment_request"]
        if req is None:
            return "You do not have a payment request."
        req["paid"] = True  # the back office books it at the next sync
        return f"Payment of {req['amount_due']} USD has been made for bill {req['bill_id']}."

    # -- functions tasks name (initialization and assertions) --

    def set_user_info(self, name: str, phone_number: str) -> None:
        self._env["name"] = name
        self._env["phone_number"] = phone_number

    def set_user_location(self, abroad: bool) -> None:
        self._env["is_abroad"] = abroad

    def turn_airplane_mode_on(self) -> str:
        if not self._toggle_airplane():
            self._toggle_airplane()
        return "Airplane Mode is now ON."

    def turn_airplane_mode_off(self) -> str:
        if self._toggle_airplane():
            self._toggle_airplane()
        return "Airplane Mode is now OFF."

    def unseat_sim_card(self) -> str:
        self._dev["sim_card_missing"] = True
        self.simulate_network_search()
        return "SIM card un-seated successfully."

    def lock_sim_card(self, mode: str) -> str:
        if mode in ("pin", "puk"):
            self._dev["sim_card_status"] = f"locked_{mode}"
        self.simulate_network_search()
        return f"SIM card locked successfully in {mode} mode."

    def turn_data_on(self) -> str:
        self._dev["data_enabled"] = True  # τ² does not search the network here
        return "Data connection restored."

    def turn_data_off(self) -> str:
        if self._toggle("data_enabled", search=True):
            self._toggle("data_enabled", search=True)
        return "Data connection broken."

    def turn_roaming_on(self) -> str:
        if not self._toggle("roaming_enabled", search=True):
            self._toggle("roaming_enabled", search=True)
        return "Data Roaming is now ON."

    def turn_roaming_off(self) -> str:
        if self._toggle("roaming_enabled", search=True):
            self._toggle("roaming_enabled", search=True)
        return "Data Roaming is now OFF."

    def turn_data_saver_mode_on(self) -> str:
        if not self._toggle("data_saver_mode", search=False):
            self._toggle("data_saver_mode", search=False)
        return "Data Saver Mode is now ON."

    def turn_data_saver_mode_off(self) -> str:
        if self._toggle("data_saver_mode", search=False):
            self._toggle("data_saver_mode", search=False)
        return "Data Saver Mode is now OFF."

    def break_apn_settings(self) -> str:
        apn = self._dev["active_apn_settings"]
        _attr(apn, "apn_name")
        apn["apn_name"] = "broken"
        self.simulate_network_search()
        return "APN settings broken. Please call reset_apn_settings() to fix."

    def break_apn_mms_setting(self) -> str:
        apn = self._dev["active_apn_settings"]
        _attr(apn, "mmsc_url")
        apn["mmsc_url"] = None
        return "APN MMS setting broken. Please call reset_apn_settings() to fix."

    def set_wifi_calling(self, enabled: bool, mms_over_wifi: bool | None = None) -> str:
        if self._dev["wifi_calling_enabled"] != enabled:
            self._toggle("wifi_calling_enabled", search=False)
        msg = f"Wi-Fi Calling is now {'ON' if enabled else 'OFF'}."
        if mms_over_wifi is not None:
            self._dev["wifi_calling_mms_over_wifi"] = mms_over_wifi
            msg += f"\nMMS over Wi-Fi is now {'ON' if mms_over_wifi else 'OFF'}."
        return msg

    def break_vpn(self) -> str:
        """Connect the VPN and make its server slow (slow mobile data)."""
        self.connect_vpn()
        vpn = self._dev["vpn_details"]
        _attr(vpn, "server_performance")
        vpn["server_performance"] = "poor"
        return "VPN connection broken."

    def remove_app_permission(self, app_name: str, permission: str) -> tuple[bool, str]:
        app = self._dev["app_statuses"].get(app_name)
        permission = permission.lower()
        if app is None:
            return False, f"App '{app_name}' not found. Cannot remove permission."
        if permission not in app["permissions"]:
            return False, f"Permission '{permission}' not tracked for app '{app_name}'."
        app["permissions"][permission] = False
        return True, f"Permission '{permission}' removed from app '{app_name}'."

    def assert_airplane_mode_status(self, expected_status: bool) -> bool:
        return bool(self._dev["airplane_mode"] == expected_status)

    def assert_service_status(self, expected_status: str) -> bool:
        if expected_status not in ("connected", "searching", "no_service", "emergency_only"):
            raise ValueError(f"'{expected_status}' is not a valid NetworkStatus")
        return bool(self._dev["network_connection_status"] == expected_status)

    def assert_mobile_data_status(self, expected_status: bool) -> bool:
        return self._mobile_data_working() == expected_status

    def assert_mobile_roaming_status(self, expected_status: bool) -> bool:
        return bool(self._dev["roaming_enabled"] == expected_status)

    def assert_mobile_data_saver_mode_status(self, expected_status: bool) -> bool:
        return bool(self._dev["data_saver_mode"] == expected_status)

    def assert_internet_speed(
        self, expected_speed: float, expected_desc: str | None = None
    ) -> bool:
        speed, desc = self._speed()
        speed = speed or 0.0
        if expected_desc is None:
            return speed >= expected_speed
        return speed >= expected_speed and desc.lower() == expected_desc.lower()

    def assert_internet_not_excellent(self) -> bool:
        return self._speed()[1].lower() != "excellent"

    def assert_can_send_mms(self, expected_status: bool) -> bool:
        return bool(self._mms_ok() == expected_status)

    def assert_mobile_data_usage_exceeded(self, expected_status: bool) -> bool:
        return bool(self._env["mobile_data_usage_exceeded"] == expected_status)


# --------------------------------------------------------------------------------------
# The world


class TelecomWorld(World):
    """Keeps the phone's surroundings in step with the back office after every call."""

    agent: TelecomTools
    user: TelecomUserTools

    def __init__(self, agent: TelecomTools, user: TelecomUserTools) -> None:
        super().__init__(agent, user)
        self.sync()

    def sync(self) -> None:
        env = self.user.db["surroundings"]
        phone = env["phone_number"]
        if phone is None:
            return
        office = self.agent
        line = office._line_by_phone(phone)
        env["line_active"] = line["status"] == "Active"
        env["roaming_allowed"] = bool(line["roaming_enabled"])
        plan = office._plan(line["plan_id"])
        cap = plan["data_limit_gb"] + line["data_refueling_gb"]
        env["mobile_data_usage_exceeded"] = line["data_used_gb"] >= cap
        req = env["payment_request"]
        if req is not None and req["paid"]:
            office._bill(req["bill_id"])["status"] = "Paid"
            env["payment_request"] = req = None
        if req is None:
            waiting = office._awaiting_payment(office._customer_by_phone(phone))
            if waiting:
                bill = waiting[0]
                env["payment_request"] = {
                    "bill_id": bill["bill_id"],
                    "amount_due": _f(bill["total_due"]),
                    "paid": False,
                }


AGENT_KIT = TelecomTools
USER_KIT = TelecomUserTools


def make_world(domain_dir: Path) -> TelecomWorld:
    """A fresh telecom episode from the domain folder's `db.toml` and `user_db.toml`."""
    domain_dir = Path(domain_dir)
    agent = TelecomTools(load_json_db(domain_dir / "db.toml", normalize_agent_db))
    user = TelecomUserTools(load_json_db(domain_dir / "user_db.toml", normalize_user_db))
    return TelecomWorld(agent, user)


def _compose_policy(domain_dir: Path, tech_support_file: str) -> str:
    domain_dir = Path(domain_dir)
    main = (domain_dir / "main_policy.md").read_text(encoding="utf-8")
    tech = (domain_dir / tech_support_file).read_text(encoding="utf-8")
    return (
        f"<main_policy>\n{main}\n</main_policy>\n"
        f"<tech_support_policy>\n{tech}\n</tech_support_policy>"
    )


def policy(domain_dir: Path) -> str:
    """The agent policy of τ²'s "telecom" (manual) environment."""
    return _compose_policy(domain_dir, "tech_support_manual.md")


def workflow_policy(domain_dir: Path) -> str:
    """The agent policy of τ²'s "telecom-workflow" environment."""
    return _compose_policy(domain_dir, "tech_support_workflow.md")
