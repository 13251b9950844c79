"""Names agentload puts on the wire, in one place: the headers every call carries.

`X-Session-ID` is the convention routers already use for session affinity; the
`X-Agentload-*` headers are harmless to real servers and let the embedded simulator play the
role a call is for.
"""

SESSION_HEADER = "X-Session-ID"
ROLE_HEADER = "X-Agentload-Role"
TASK_HEADER = "X-Agentload-Task"
EPISODE_HEADER = "X-Agentload-Episode"
"""The episode's seed (from the run's seed, its task and trial): the same in every run with
that seed, so the embedded simulator plays an episode the same way each time (a session id
carries the run's id)."""
FAULT_HEADER = "X-Agentload-Fault"
"""Forces a simulator fault of the named kind on this request (`none`: no fault)."""
