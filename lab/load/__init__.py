"""The harness's run of a scenario: one record per scenario x variant.

The package: ``runner`` (a plan's variants in turn, databases made ahead, claims attached,
records written), ``plan`` (what a run asks for, the connections a variant takes),
``variant`` (one variant: fresh database, setup, the load, invariants, evidence, the
record), ``databases`` (the run databases on the server), ``facts`` (how a variant ran:
machine, processes), ``workload`` (actors, arrival, connections, hard timeouts),
``txpool`` (node-postgres' pool semantics, a transaction per checkout), ``shard`` (the load
over worker processes), ``redisclients`` (the pooled Redis client; the pipelined one is
lab/kit/autopipe.py), ``redisstats`` and ``redisbench`` (Redis's own counters,
redis-benchmark), ``links`` (--rtt's delayed links to Redis and PgBouncer), ``evidence``
and ``locks`` (what the server reports: deadlock reports, pg_stat_database, who blocks
whom), ``bench`` (`locklab bench`: the harness against pgbench).
"""
