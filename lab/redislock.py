"""The release of a Redis lock the documents recommend, shared by every scenario that takes one.

"DEL only if the value is still mine", atomic inside Redis: a holder whose lease expired
and was taken over cannot delete the next holder's lock. Call it with the lock's key and
the holder's token: ``await redis.eval(COMPARE_AND_DELETE, 1, key, token)`` returns 1 when
it deleted, 0 when the lock was gone or someone else's.
"""

COMPARE_AND_DELETE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) "
    "else return 0 end"
)
