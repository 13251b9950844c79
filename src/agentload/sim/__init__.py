"""The embedded engine simulator: vLLM's OpenAI API over a continuous-batching timing model.

Python API::

    from agentload.sim import SimConfig, SimServer, SimProcess

    async with SimServer(SimConfig(port=0, profile="tiny-cpu", speedup=10)) as sim:
        ...  # sim.base_url is "http://127.0.0.1:<port>/v1"

    with SimProcess(SimConfig(port=0)) as sim:  # its own process
        ...
"""

from agentload.sim.api import SimProcess, SimServer
from agentload.sim.behaviour import (
    BEHAVIOURS,
    Behaviour,
    GenericBehaviour,
    RequestView,
    ResponsePlan,
    ToolCallPlan,
    register_behaviour,
)
from agentload.sim.faults import predict_fault
from agentload.sim.profiles import BUILTIN_PROFILES, Profile, load_profile
from agentload.sim.settings import FAULT_KINDS, SimConfig

__all__ = [
    "BEHAVIOURS",
    "BUILTIN_PROFILES",
    "FAULT_KINDS",
    "Behaviour",
    "GenericBehaviour",
    "Profile",
    "RequestView",
    "ResponsePlan",
    "SimConfig",
    "SimProcess",
    "SimServer",
    "ToolCallPlan",
    "load_profile",
    "predict_fault",
    "register_behaviour",
]
