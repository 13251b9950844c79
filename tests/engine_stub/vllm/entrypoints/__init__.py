"""Test stand-in package (see api_server.py)."""
