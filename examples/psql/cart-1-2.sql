-- A cart that updates account 1, then account 2.
BEGIN;
UPDATE accounts SET balance = balance - 1 WHERE id = 1;
UPDATE accounts SET balance = balance - 1 WHERE id = 2;
COMMIT;
