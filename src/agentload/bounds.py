"""Ceilings of every count and duration a configuration takes.

Each is far above any real run, so that a typo (1e30) is refused when the configuration is
read instead of exhausting memory later; shared by the run's and the simulator's settings.
"""

INT64_MAX = 2**63 - 1
MAX_EPISODES = 10_000_000
MAX_CONCURRENCY = 100_000
MAX_STEPS = 100_000
MAX_TOKENS = 10_000_000
DAY_S = 86_400.0
