-- One tag of that name (a caller that failed shows in its exit status).
SELECT count(*) = 1 FROM tags WHERE name = 'postgres'
