#!/bin/sh
# Record an agent's own traffic to a server: every chat completion through the proxy becomes a
# measured call (calls, sessions, trajectories, summary and report in --out); SIGTERM or Ctrl-C
# writes them all. Point the agent's OpenAI base URL at http://127.0.0.1:9000/v1, or
# http://127.0.0.1:9000/s/<session>/v1 to name its sessions (docs/external-agents.md).
exec agentload proxy --upstream http://127.0.0.1:8000/v1 --port 9000 --out results/proxy
