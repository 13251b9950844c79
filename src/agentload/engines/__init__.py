"""Real inference engines: what a server is and whether it can run a benchmark."""
