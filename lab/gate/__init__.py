"""The gate on the wire: a PostgreSQL proxy whose client statements are step points
(proxy.py), the protocol's frames as a proxy reads them (wire.py), and where it connects
and what a client is told to connect to (dsn.py)."""

from lab.gate.dsn import gate_dsn, upstream_of
from lab.gate.proxy import Gate, Group, Keeper, Session, Upstream

__all__ = ["Gate", "Group", "Keeper", "Session", "Upstream", "gate_dsn", "upstream_of"]
