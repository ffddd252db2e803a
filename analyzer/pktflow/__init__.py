"""pktflow: PostgreSQL wire protocol and TCP transfer dynamics from packet captures."""

__version__ = "0.1.0"

# Decides, before any per-packet module is imported, whether they run compiled or as source.
from pktflow import compiled as _compiled  # noqa: E402,F401
