CREATE TABLE t10k AS SELECT i AS id, repeat(md5(i::text), 3) AS payload FROM generate_series(1, 10000) AS i;
CREATE TABLE tdump AS SELECT i AS id, repeat(md5(i::text), 3) AS payload FROM generate_series(1, 100000) AS i;
