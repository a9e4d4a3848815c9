"""The gate on the wire: a PostgreSQL proxy on loopback whose client statements are step
points, and the orders of unchanged programs' statements run through it.

The package: ``proxy`` (the gate: a client's statement is held until its keeper lets it go),
``wire`` (the protocol's frames as a proxy reads them), ``dsn`` (where the gate connects and
what a client is told to connect to), ``actors`` (a command as a process, a function
in a thread: how an actor runs), ``login`` (whom actors log in as: a login pgjdbc
can do where the lab's superuser's is not), ``serve`` (`locklab gate`: the gate on its own, in
front of a server, until Ctrl-C), ``order`` (one order of the programs' statements, one let
go at a time), ``workspace`` (a fresh database and Redis per order, and its judge),
``resp`` (the Redis protocol's commands and replies), ``redisgate`` (the gate for Redis:
its commands as steps), ``keys`` (what a Redis command touched, and a lease run out as
a step), ``explore`` (every order, each on a fresh database, and trace's one),
``sample`` (orders drawn at random when replays diverge: PCT's priorities), ``reduce``
(fewer orders, none missed: sleep sets over what the server says each statement
touched), ``commits`` (when the end of a transaction that wrote moves past another
actor's read committed step), ``spec`` (a broken order as an isolation spec, shrunk
until every step matters), ``bench`` (`locklab bench gate`: what the gate costs against PgBouncer and a direct
connection).
"""

from lab.gate.dsn import gate_dsn, upstream_of
from lab.gate.proxy import Gate, Group, Keeper, Session, Upstream

__all__ = ["Gate", "Group", "Keeper", "Session", "Upstream", "gate_dsn", "upstream_of"]
