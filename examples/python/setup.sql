-- The deposits' account, with 100: what every order starts from (the table the SQLAlchemy
-- example maps as Account).
CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts VALUES (1, 100);
