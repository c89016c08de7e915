-- CTEs before INSERT, CREATE TABLE AS of values, and derived tables without names.
WITH big AS (SELECT customer_id, qty FROM public.sales WHERE qty > 10)
INSERT INTO public.counters SELECT customer_id, qty FROM big;
WITH a AS (SELECT id, region FROM public.customers), b AS (SELECT id FROM a WHERE region = 'us')
INSERT INTO public.counters (id, total) SELECT b.id, 0 FROM b;
CREATE TABLE public.one_row AS SELECT 1;
CREATE TABLE public.constants AS SELECT 1 AS id, 'x' AS label;
INSERT INTO public.pairs SELECT name, email
FROM (SELECT id, name FROM public.customers) LEFT JOIN (SELECT id, email FROM public.customers_stage) USING (id);
WITH totals AS (SELECT customer_id, sum(qty) AS qty FROM public.sales GROUP BY customer_id)
INSERT INTO public.counters SELECT t.customer_id, t.qty FROM totals t JOIN public.customers c ON c.id = t.customer_id;
