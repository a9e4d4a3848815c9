"""Parts the scenarios' code under test builds on.

The package: ``redislock`` (the release of a Redis lock the documents recommend, and
`Redlock` over several masters), ``provider`` (a payment provider and message sink on
loopback, in a worker process of its own), ``autopipe`` (a Redis client that pipelines
what one event-loop iteration asks, as node-redis does), ``waiters`` (waiters as data:
poll loops written as generators whose commands go into that pipeline).
"""
