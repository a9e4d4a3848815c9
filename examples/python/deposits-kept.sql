-- Two deposits of 10 on 100: both must be there.
SELECT balance = 120 FROM accounts WHERE id = 1
