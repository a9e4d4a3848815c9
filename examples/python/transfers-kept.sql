-- Transfers move money, never make or lose it (a transfer that failed moved nothing; the
-- order breaks by its exit status).
SELECT sum(balance) = 200 FROM accounts
