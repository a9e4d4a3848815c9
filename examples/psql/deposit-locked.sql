-- Fixed: the read takes the row lock (FOR UPDATE), so the other deposit waits for the
-- commit and reads the new balance.
BEGIN;
SELECT balance FROM accounts WHERE id = 1 FOR UPDATE \gset
UPDATE accounts SET balance = :balance + 10 WHERE id = 1;
COMMIT;
