-- Tables the examples of the PostgreSQL and Redshift documentation read and write (their shapes, smaller).
CREATE TABLE public.customers (id INT, name VARCHAR(64), email VARCHAR(128), region VARCHAR(16));
CREATE TABLE public.customers_stage (id INT, name VARCHAR(64), email VARCHAR(128), region VARCHAR(16), op CHAR(1));
CREATE TABLE public.sales (salesid INT, customer_id INT, qty INT, price DECIMAL(8,2), saletime TIMESTAMP);
CREATE TABLE public.category (catid INT, catgroup VARCHAR(10), catname VARCHAR(10));
CREATE TABLE public.category_stage (catid INT, catgroup VARCHAR(10), catname VARCHAR(10));
CREATE TABLE public.counters (id INT, total INT);
CREATE TABLE public.venue (venueid INT, venuename VARCHAR(100), venuecity VARCHAR(30), venueseats INT);
