"""A pinned run's fast reset: empty the scenario's tables instead of making them again.

Dropping the ``public`` schema and running a scenario's DDL again costs ~10 ms a run; a
scenario that declares its DDL apart (``Scenario.schema``) has it run once per database,
and every later run starts from the tables emptied back to their state right after the
schema ran:

* nothing in ``public``'s catalog changed since (``FINGERPRINT``: a step may run DDL, an
  ``ALTER TABLE ... ADD COLUMN`` say; then the full path runs);
* every row deleted with triggers and foreign keys off (``session_replication_role =
  replica``), then ``VACUUM``: each table and its TOAST table must be back to 0 pages, so
  rows land in insertion order again, at the same line pointers, and a seq scan (and so
  an UPDATE's lock order) meets them as in a new table; a table still holding pages (a
  snapshot that kept the deleted rows, a lock that kept VACUUM from truncating) sends
  the reset down the full path;
* the planner's view restored: pg_class's relpages / reltuples / relallvisible as the
  schema left them (VACUUM of an empty table writes reltuples 0 where a new one has -1,
  which turns off the planner's 10-page guess and with it index scans), pg_statistic
  rows deleted, the tables' activity counters zeroed (autovacuum's thresholds);
* every sequence back to its post-schema value (``setval``).

A btree index keeps its (empty) root page after the VACUUM, where a new one has only its
metapage: the two differ only until the run's first entry in that index, and until then
a scan of it finds and locks nothing. Anything this does not cover (partitioned or
inherited tables, materialized views, unlogged tables, non-btree indexes, triggers or
rules that fire in replica mode, cached sequences, extended statistics, a role that is
not superuser) keeps the full path for the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

PUBLIC = "'public'::regnamespace"

# What a step's DDL could change in public: a hash of the catalog rows' versions (a row
# made, changed or dropped changes its (xmin, ctid) set), and of pg_class's columns bar
# those VACUUM, ANALYZE and the reset write. $1: the relations the schema made, whose
# rows are found by index; a relation made since shows in pg_class.
FINGERPRINT = f"""
SELECT md5(concat_ws('|',
  (SELECT oid FROM pg_namespace WHERE nspname = 'public'),
  (SELECT string_agg(concat_ws(',', oid, relname, relkind, relfilenode, reltoastrelid,
     relpersistence, relnatts, relchecks, relhasindex, relhasrules, relhastriggers,
     relhassubclass, relrowsecurity, relforcerowsecurity, relreplident, relispartition,
     relowner, relam, relacl, reloptions), ';' ORDER BY oid)
   FROM pg_class WHERE relnamespace = {PUBLIC}),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY attrelid, attnum) FROM pg_attribute x
   WHERE attrelid = ANY($1::oid[])),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY oid) FROM pg_attrdef x WHERE adrelid = ANY($1::oid[])),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY oid) FROM pg_constraint x
   WHERE connamespace = {PUBLIC}),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY indexrelid) FROM pg_index x
   WHERE indrelid = ANY($1::oid[])),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY oid) FROM pg_trigger x WHERE tgrelid = ANY($1::oid[])),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY oid) FROM pg_rewrite x WHERE ev_class = ANY($1::oid[])),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY oid) FROM pg_policy x WHERE polrelid = ANY($1::oid[])),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY seqrelid) FROM pg_sequence x
   WHERE seqrelid = ANY($1::oid[])),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY inhrelid, inhseqno) FROM pg_inherits x
   WHERE inhrelid = ANY($1::oid[]) OR inhparent = ANY($1::oid[])),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY oid) FROM pg_proc x WHERE pronamespace = {PUBLIC}),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY oid) FROM pg_type x WHERE typnamespace = {PUBLIC}),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY x.oid) FROM pg_enum x
   JOIN pg_type t ON t.oid = x.enumtypid WHERE t.typnamespace = {PUBLIC}),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY oid) FROM pg_operator x
   WHERE oprnamespace = {PUBLIC}),
  (SELECT string_agg(concat(x.xmin, x.ctid), ';' ORDER BY oid) FROM pg_statistic_ext x
   WHERE stxnamespace = {PUBLIC})
))"""
OWN = f"SELECT array_agg(oid) FROM pg_class WHERE relnamespace = {PUBLIC}"

# Why the fast path cannot stand for the DDL path in this database (NULL: it can).
UNUSUAL = f"""
SELECT coalesce(
  (SELECT 'not a superuser (pg_class and session_replication_role need one)'
   WHERE NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)),
  (SELECT format('%s is of relkind %s', relname, relkind) FROM pg_class
   WHERE relnamespace = {PUBLIC} AND relkind NOT IN ('r', 'i', 'S', 'v', 'c') LIMIT 1),
  (SELECT format('%s is not a permanent relation', relname) FROM pg_class
   WHERE relnamespace = {PUBLIC} AND relpersistence <> 'p' LIMIT 1),
  (SELECT format('%s is inherited or a partition', c.relname) FROM pg_inherits x
   JOIN pg_class c ON c.oid = x.inhrelid WHERE c.relnamespace = {PUBLIC} LIMIT 1),
  (SELECT format('index %s is not a btree', c.relname) FROM pg_class c
   JOIN pg_am a ON a.oid = c.relam
   WHERE c.relnamespace = {PUBLIC} AND c.relkind = 'i' AND a.amname <> 'btree' LIMIT 1),
  (SELECT format('trigger %s fires in replica mode', x.tgname) FROM pg_trigger x
   JOIN pg_class c ON c.oid = x.tgrelid
   WHERE c.relnamespace = {PUBLIC} AND x.tgenabled IN ('A', 'R') LIMIT 1),
  (SELECT format('rule %s on a table', x.rulename) FROM pg_rewrite x
   JOIN pg_class c ON c.oid = x.ev_class WHERE c.relnamespace = {PUBLIC} AND c.relkind <> 'v'
   LIMIT 1),
  (SELECT format('sequence %s caches %s values', c.relname, x.seqcache) FROM pg_sequence x
   JOIN pg_class c ON c.oid = x.seqrelid WHERE c.relnamespace = {PUBLIC} AND x.seqcache <> 1
   LIMIT 1),
  (SELECT 'the schema made statistics' FROM pg_statistic x
   JOIN pg_class c ON c.oid = x.starelid WHERE c.relnamespace = {PUBLIC} LIMIT 1),
  (SELECT 'extended statistics' FROM pg_statistic_ext WHERE stxnamespace = {PUBLIC} LIMIT 1)
)"""

# Every relation the reset restores the planner's view of: public's tables, indexes and
# sequences, and the tables' TOAST tables with their indexes.
RELATIONS = f"""
WITH own AS (SELECT oid, relname, relkind, reltoastrelid FROM pg_class
             WHERE relnamespace = {PUBLIC} AND relkind IN ('r', 'i', 'S')),
toast AS (SELECT reltoastrelid AS oid FROM own WHERE relkind = 'r' AND reltoastrelid <> 0),
rels AS (SELECT oid FROM own UNION SELECT oid FROM toast
         UNION SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT oid FROM toast))
SELECT c.oid, c.relkind, format('%I', c.relname) AS name, c.relpages, c.reltuples,
       c.relallvisible, c.relnamespace = {PUBLIC} AS own
FROM pg_class c JOIN rels USING (oid) ORDER BY c.oid"""

# One round trip after the VACUUM: the catalog as the schema left it (the fingerprint, on
# the statement's snapshot: before its own UPDATE), the heaps' sizes (0 pages each), the
# pg_class statistics back, pg_statistic emptied, the counters zeroed, the sequences set.
RESTORE = f"""
WITH stats AS (
  UPDATE pg_class c SET relpages = s.pages, reltuples = s.tuples, relallvisible = s.vis
  FROM unnest($2::oid[], $3::int[], $4::real[], $5::int[]) AS s(rel, pages, tuples, vis)
  WHERE c.oid = s.rel RETURNING 1),
gone AS (DELETE FROM pg_statistic WHERE starelid = ANY($2::oid[]) RETURNING 1)
SELECT ({FINGERPRINT.replace("$1::oid[]", "$9::oid[]")}) = $10
       AND (SELECT coalesce(bool_and(pg_relation_size(h) = 0), true) FROM unnest($1::oid[]) h),
       (SELECT count(*) FROM stats), (SELECT count(*) FROM gone),
       (SELECT count(pg_stat_reset_single_table_counters(t)) FROM unnest($1::oid[]) t),
       (SELECT count(setval(q::regclass, v, called))
        FROM unnest($6::oid[], $7::bigint[], $8::bool[]) AS q(q, v, called))"""


@dataclass(frozen=True)
class Baseline:
    """public right after the schema ran: what a fast reset brings the database back to."""

    key: str  # what the schema was run for (the reset's caller decides: variant, params)
    own: tuple[int, ...]  # every relation in public
    fingerprint: str
    tables: tuple[str, ...]  # quoted names
    heaps: tuple[int, ...]  # the tables and their TOAST tables: 0 pages after the VACUUM
    stats: tuple[tuple[int, int, float, int], ...]  # (oid, relpages, reltuples, relallvisible)
    sequences: tuple[tuple[int, int, bool], ...]  # (oid, last_value, is_called)


async def baseline(conn: Any, key: str) -> Baseline | str:  # conn: a pool's connection
    """What the fast reset restores, read right after the schema ran; or why it cannot."""
    why = await conn.fetchval(UNUSUAL)
    if why is not None:
        return str(why)
    rels = await conn.fetch(RELATIONS)
    own = [r for r in rels if r["own"]]
    tables = [r for r in own if r["relkind"] == b"r"]
    toast = [r["oid"] for r in rels if r["relkind"] == b"t"]
    seqs = []
    for r in own:
        if r["relkind"] == b"S":
            row = await conn.fetchrow(f"SELECT last_value, is_called FROM {r['name']}")
            seqs.append((r["oid"], row["last_value"], row["is_called"]))
    own_oids = await conn.fetchval(OWN) or []
    return Baseline(
        key=key,
        own=tuple(own_oids),
        fingerprint=await conn.fetchval(FINGERPRINT, own_oids),
        tables=tuple(r["name"] for r in tables),
        heaps=tuple([r["oid"] for r in tables] + toast),
        stats=tuple((r["oid"], r["relpages"], r["reltuples"], r["relallvisible"]) for r in rels),
        sequences=tuple(seqs),
    )


async def fast_reset(conn: Any, base: Baseline) -> bool:
    """Bring public back to `base`; False when the full path must run instead: the catalog
    changed (checked after the emptying, so that it all takes three round trips; the full
    path then drops whatever the emptying did), or VACUUM left a table with pages."""
    stats = [[r[i] for r in base.stats] for i in range(4)]
    seqs = [[q[i] for q in base.sequences] for i in range(3)]
    deletes = "".join(f"DELETE FROM {t}; " for t in base.tables)
    try:
        if base.tables:
            await conn.execute(
                f"BEGIN; SET LOCAL session_replication_role = replica; {deletes}COMMIT"
            )
            await conn.execute(f"VACUUM {', '.join(base.tables)}")
        fp = (list(base.own), base.fingerprint)
        return bool(await conn.fetchval(RESTORE, list(base.heaps), *stats, *seqs, *fp))
    except asyncpg.PostgresError:  # a table a step dropped or renamed: the full path
        if not conn.is_closed() and conn.is_in_transaction():
            await conn.execute("ROLLBACK")
        return False
