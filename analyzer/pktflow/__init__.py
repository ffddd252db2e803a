"""pktflow: PostgreSQL wire protocol and TCP transfer dynamics from packet captures."""

__version__ = "0.1.0"
