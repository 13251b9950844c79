"""Registers ``agentload sim`` on the main command line."""

from __future__ import annotations

from agentload.cli import app
from agentload.sim.command import sim_command

app.command("sim")(sim_command)
