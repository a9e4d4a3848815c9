-- Buggy beside cart-1-2.sql: the same two rows in the opposite order (cart order).
BEGIN;
UPDATE accounts SET balance = balance - 1 WHERE id = 2;
UPDATE accounts SET balance = balance - 1 WHERE id = 1;
COMMIT;
