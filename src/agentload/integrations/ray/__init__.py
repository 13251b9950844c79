"""agentload on a Ray cluster: `agentload run --ray ADDRESS` (config `ray:`).

The workers of a distributed run (agentload.distributed) become Ray actors placed over the
cluster's nodes (`backend`, `actor`); the driver measures each node's clock offset and moves
the records onto its own clocks (`clock`). Needs the `ray` extra on the driver and on every
node. See docs/distributed.md.
"""
