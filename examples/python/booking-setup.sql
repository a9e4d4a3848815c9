-- Room 1 sleeps one, and nobody has booked it yet.
CREATE TABLE rooms (id int PRIMARY KEY, capacity int NOT NULL);
INSERT INTO rooms VALUES (1, 1);
CREATE TABLE bookings (
    id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    room_id int NOT NULL,
    day date NOT NULL,
    guest text NOT NULL
);
