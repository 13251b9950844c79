"""Agents agentload does not drive, run as the `external` workload kind: the adapters that
talk to them (`adapters`, `openclaw`), the routing of their LLM calls through the recording
proxy (`routing`), and a small reference agent (`reference_agent`)."""
