"""Parts the scenarios' code under test builds on: a Redis lock (redislock), a payment
provider and message sink in a process of its own (provider), the pipelined Redis client
(autopipe) and waiters as data on it (waiters)."""
