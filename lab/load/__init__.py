"""The harness's run of a scenario: one record per scenario x variant.

runner (fresh database, setup, a load or pinned run, invariants, evidence, the record),
workload (actors, arrival, connections, knobs), txpool (a transaction-mode pool like
PgBouncer's), shard (the load over worker processes), redisclients (the pooled Redis
client; the pipelined one is lab/kit/autopipe.py), redisstats and redisbench (Redis's
own counters, redis-benchmark), links (--rtt proxies), evidence and locks (what the
server reports: pg_locks, the log's deadlock reports), bench (`locklab bench`).
"""
