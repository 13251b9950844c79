"""τ²-bench's mock domain: a small task list the agent manages, and a notification inbox the
user manages with tools of their own. It exists to exercise τ²'s machinery (initialization
data and actions, message histories, user tools, environment assertions).

Tools, schemas, errors, database effects and answers follow τ²-bench's `domains/mock`
(sierra-research/tau2-bench). The agent's database is a plain dict in `MockDB`'s dump shape,
the user's in `MockUserDB`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentload.domains.tau2.retail import TRANSFER_DESCRIPTION, string_fields
from agentload.domains.tau2.toolkit import (
    Record,
    ToolError,
    ToolKit,
    World,
    deep_update,
    load_json_db,
    read_policy,
    tool,
)

__all__ = ["AGENT_KIT", "USER_KIT", "MockTools", "MockUserTools", "MockWorld", "make_world"]


def _table(db: dict[str, Any], key: str) -> dict[str, Any]:
    """One of the database's tables. After τ²'s initialization data, a side's kit can hold
    the other side's database (see MockWorld); τ² then fails on the missing attribute, and
    the agent reads that error."""
    try:
        return db[key]
    except KeyError:
        model = "MockUserDB" if "notifications" in db else "MockDB"
        raise ToolError(f"{model!r} object has no attribute {key!r}") from None


def _only_keys(what: str, data: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    extra = set(data) - set(allowed)
    if extra:  # τ²'s models of these forbid other keys
        raise ValueError(f"unexpected keys in the mock {what}: {sorted(extra)}")


def normalize_agent_db(db: dict[str, Any]) -> dict[str, Any]:
    """The task list as τ²'s MockDB dumps it (a task's description defaults to None)."""
    _only_keys("database", db, ("tasks", "users"))
    return {
        "tasks": {
            tid: {
                "task_id": t["task_id"],
                "title": t["title"],
                "description": t.get("description"),
                "status": t["status"],
            }
            for tid, t in db["tasks"].items()
        },
        "users": {
            uid: {"user_id": u["user_id"], "name": u["name"], "tasks": list(u["tasks"])}
            for uid, u in db["users"].items()
        },
    }


def normalize_user_db(db: dict[str, Any]) -> dict[str, Any]:
    """The inbox as τ²'s MockUserDB dumps it (status defaults to "unread", task_id to None)."""
    _only_keys("user database", db, ("notifications",))
    notes = {}
    for nid, n in (db.get("notifications") or {}).items():
        _only_keys("notification", n, ("notification_id", "message", "status", "task_id"))
        notes[nid] = {
            "notification_id": n["notification_id"],
            "message": n["message"],
            "status": n.get("status", "unread"),
            "task_id": n.get("task_id"),
        }
    return {"notifications": notes}


class MockTools(ToolKit):
    """The agent's tools over the task list (τ²'s MockTools)."""

    @tool(
        "write",
        description="Create a new task for a user.",
        parameters={
            "properties": {
                "user_id": {
                    "description": "The ID of the user creating the task",
                    "title": "User Id",
                    "type": "string",
                },
                "title": {
                    "description": "The title of the task",
                    "title": "Title",
                    "type": "string",
                },
                "description": {
                    "default": None,
                    "description": "Optional description of the task",
                    "title": "Description",
                    "type": "string",
                },
            },
            "required": ["user_id", "title"],
            "title": "parameters",
            "type": "object",
        },
    )
    def create_task(self, user_id: str, title: str, description: str | None = None) -> Record:
        users = _table(self.db, "users")
        if user_id not in users:
            raise ToolError(f"User {user_id} not found")
        tasks = _table(self.db, "tasks")
        # Numbered by count, as τ² does: an existing id with that number is overwritten.
        task_id = f"task_{len(tasks) + 1}"
        string_fields(
            "Task",
            (
                ("task_id", task_id, False),
                ("title", title, False),
                ("description", description, True),
            ),
        )
        task = {"task_id": task_id, "title": title, "description": description, "status": "pending"}
        tasks[task_id] = task
        users[user_id]["tasks"].append(task_id)
        return Record(task)

    @tool(
        "read",
        description="Get all users in the database.",
        parameters={"properties": {}, "title": "parameters", "type": "object"},
    )
    def get_users(self) -> list[Record]:
        return [Record(u) for u in _table(self.db, "users").values()]

    @tool(
        "write",
        description="Update the status of a task.",
        parameters={
            "properties": {
                "task_id": {
                    "description": "The ID of the task to update",
                    "title": "Task Id",
                    "type": "string",
                },
                "status": {
                    "description": "The new status of the task",
                    "enum": ["pending", "completed"],
                    "title": "Status",
                    "type": "string",
                },
            },
            "required": ["task_id", "status"],
            "title": "parameters",
            "type": "object",
        },
    )
    def update_task_status(self, task_id: str, status: str) -> Record:
        tasks = _table(self.db, "tasks")
        if task_id not in tasks:
            raise ToolError(f"Task {task_id} not found")
        task = tasks[task_id]
        task["status"] = status  # unchecked, as in τ² (its models do not validate on set)
        return Record(task)

    def assert_number_of_tasks(self, user_id: str, expected_number: int) -> bool:
        """Environment assertion: the user has this many tasks."""
        users = _table(self.db, "users")
        if user_id not in users:
            raise ToolError(f"User {user_id} not found")
        return len(users[user_id]["tasks"]) == expected_number

    def assert_task_status(self, task_id: str, expected_status: str) -> bool:
        """Environment assertion: the task has this status."""
        tasks = _table(self.db, "tasks")
        if task_id not in tasks:
            raise ToolError(f"Task {task_id} not found")
        return bool(tasks[task_id]["status"] == expected_status)

    @tool(
        "generic",
        description=TRANSFER_DESCRIPTION,
        parameters={
            "properties": {
                "summary": {
                    "description": "A summary of the user's issue.",
                    "title": "Summary",
                    "type": "string",
                }
            },
            "required": ["summary"],
            "title": "parameters",
            "type": "object",
        },
    )
    def transfer_to_human_agents(self, summary: str) -> str:
        return "Transfer successful"

    def normalize(self, db: dict[str, Any]) -> dict[str, Any]:
        return normalize_agent_db(db)


class MockUserTools(ToolKit):
    """The user's tools over their notification inbox (τ²'s MockUserTools)."""

    @tool(
        "read",
        description="Check all notifications in the user's inbox.",
        parameters={"properties": {}, "title": "parameters", "type": "object"},
    )
    def check_notifications(self) -> list[Record]:
        return [Record(n) for n in _table(self.db, "notifications").values()]

    @tool(
        "write",
        description="Dismiss (mark as read) a notification.",
        parameters={
            "properties": {
                "notification_id": {
                    "description": "The ID of the notification to dismiss.",
                    "title": "Notification Id",
                    "type": "string",
                }
            },
            "required": ["notification_id"],
            "title": "parameters",
            "type": "object",
        },
    )
    def dismiss_notification(self, notification_id: str) -> str:
        notes = _table(self.db, "notifications")
        if notification_id not in notes:
            raise ToolError(f"Notification {notification_id} not found")
        notes[notification_id]["status"] = "read"
        return f"Notification {notification_id} dismissed"

    def add_notification(
        self, notification_id: str, message: str, task_id: str | None = None
    ) -> Record:
        """Initialization action: put a new, unread notification in the inbox."""
        string_fields(
            "Notification",
            (
                ("notification_id", notification_id, False),
                ("message", message, False),
                ("task_id", task_id, True),
            ),
        )
        note = {
            "notification_id": notification_id,
            "message": message,
            "status": "unread",
            "task_id": task_id,
        }
        _table(self.db, "notifications")[notification_id] = note
        return Record(note)

    def assert_notification_status(self, notification_id: str, expected_status: str) -> bool:
        """Environment assertion: the notification has this status."""
        notes = _table(self.db, "notifications")
        if notification_id not in notes:
            raise ToolError(f"Notification {notification_id} not found")
        return bool(notes[notification_id]["status"] == expected_status)

    def normalize(self, db: dict[str, Any]) -> dict[str, Any]:
        return normalize_user_db(db)


class MockWorld(World):
    """The mock domain's world. Its `update` keeps τ²'s set_state quirk: after merging the
    agent's initialization data, τ² points the user's kit at the agent's (new) database
    object, and after the user's data, the agent's kit at the user's. Both sides then share
    one database, which shows in the user database hash (it equals the agent's) and makes
    the other side's tools fail on a missing table."""

    def update(
        self, agent_data: Mapping[str, Any] | None, user_data: Mapping[str, Any] | None
    ) -> None:
        user = self.user
        if agent_data is not None:
            deep_update(self.agent.db, agent_data)
            self.agent.db = self.agent.normalize(self.agent.db)
            if user is not None:
                user.db = self.agent.db
        if user_data is not None and user is not None:
            # τ² rebuilds the user's database with the model of the object it holds then.
            shape = self.agent if user.db is self.agent.db else user
            deep_update(user.db, user_data)
            user.db = shape.normalize(user.db)
            self.agent.db = user.db


AGENT_KIT: type[ToolKit] = MockTools
USER_KIT: type[ToolKit] | None = MockUserTools


def make_world(domain_dir: Path) -> MockWorld:
    """A fresh task list and inbox from the domain folder's db.json and user_db.json."""
    folder = Path(domain_dir)
    return MockWorld(
        MockTools(load_json_db(folder / "db.json", normalize_agent_db)),
        MockUserTools(load_json_db(folder / "user_db.json", normalize_user_db)),
    )


policy = read_policy  # policy.md as it stands
