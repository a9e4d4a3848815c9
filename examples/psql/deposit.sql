-- Buggy: read the balance, add 10 in the client, write the sum back (read-compute-write).
-- Two of these at once can both read 100 and both write 110: one deposit is lost.
SELECT balance FROM accounts WHERE id = 1 \gset
UPDATE accounts SET balance = :balance + 10 WHERE id = 1;
