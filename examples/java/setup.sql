-- The checkout's inventory (two products) and the deposits' account.
CREATE TABLE inventory (product_id int PRIMARY KEY, available int NOT NULL, reserved int NOT NULL DEFAULT 0);
INSERT INTO inventory (product_id, available) VALUES (101, 10), (202, 10);
CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts VALUES (1, 100);
