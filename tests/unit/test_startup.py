"""`agentload --version` answers without loading the commands (the client, numpy, aiohttp):
a script or a shell completion asking for it must not wait a second for imports."""

from __future__ import annotations

import subprocess
import sys


def test_version_loads_no_command() -> None:
    code = (
        "import sys; sys.argv = ['agentload', '--version']\n"
        "from agentload.cli import main; main()\n"
        "heavy = ('aiohttp', 'numpy', 'typer', 'agentload.cli.run')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "print('heavy:', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0].startswith("agentload ") and lines[1] == "heavy: []"


def test_the_app_still_has_every_command() -> None:
    from agentload.cli import COMMAND_MODULES, app

    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert {"run", "sweep", "replay", "compare", "sim", "dataset"} <= names
    assert all(m in sys.modules for m in COMMAND_MODULES)


def test_the_command_list_gives_each_command_one_sentence() -> None:
    from agentload.cli import app

    infos = [*app.registered_commands, *app.registered_groups]
    assert len(infos) >= 14
    for info in infos:
        text = info.short_help or ""
        # One sentence, no hard line break from the command's own --help text.
        assert text and "\n" not in text and text.count(". ") == 0, (info.name, text)
