-- No room holds more bookings on a day than it sleeps.
SELECT count(*) <= (SELECT capacity FROM rooms WHERE id = 1) FROM bookings WHERE room_id = 1
