"""bridge_client: drive an AI agent that lives in a sandbox, from plain blocking Python."""
__version__ = "0.1.0"
