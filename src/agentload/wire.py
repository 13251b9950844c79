"""Names agentload puts on the wire, in one place: the headers every call carries.

`X-Session-ID` is the convention routers already use for session affinity; the
`X-Agentload-*` headers are harmless to real servers and let the embedded simulator play the
role a call is for.
"""

SESSION_HEADER = "X-Session-ID"
ROLE_HEADER = "X-Agentload-Role"
TASK_HEADER = "X-Agentload-Task"
FAULT_HEADER = "X-Agentload-Fault"
"""Forces a simulator fault of the named kind on this request (`none`: no fault)."""
