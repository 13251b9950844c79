"""The version of agentload (read by the build, `agentload --version` and every record)."""

__version__ = "0.1.0"
