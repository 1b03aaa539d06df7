"""A Python client for Node Flow workers. Needs httpx only, not Django."""
from nodeflow_worker.client import Client, LeasedTask, StaleLease

__all__ = ["Client", "LeasedTask", "StaleLease"]
