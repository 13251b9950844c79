"""`agentload sim calibrate` and `sim fidelity`: a real engine probed, a timing profile fitted
to it, and the simulator checked against it (docs/simulator.md)."""
