"""Parts the scenarios' code under test builds on: a Redis lock (redislock), a payment
provider and message sink in a process of its own (provider), a gate that parks a
session between two statements (rowgate), and waiters as data on the pipelined Redis
client (waiters)."""
