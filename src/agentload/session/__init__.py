"""Running one session, whichever executor runs it: agentload.session.host."""

from agentload.session.host import SessionHost, load_spec, session_id_for, stamp_session

__all__ = ["SessionHost", "load_spec", "session_id_for", "stamp_session"]
