-- More shapes of the PostgreSQL and Redshift documentation.
INSERT INTO public.customers (id, name, email, region) SELECT id, name, email, region FROM public.customers_stage
WHERE op = 'I' ON CONFLICT (id) DO UPDATE SET email = EXCLUDED.email;
CREATE TABLE public.recent_sales AS SELECT * FROM public.sales WHERE saletime >= '2008-01-01';
CREATE TEMP TABLE tmp_sales AS SELECT salesid, qty FROM public.sales;
CREATE TABLE public.sales_copy (LIKE public.sales);
INSERT INTO public.sales_copy SELECT * FROM public.sales;
UPDATE public.counters SET total = s.qty FROM public.sales s WHERE counters.id = s.customer_id;
DELETE FROM public.customers USING public.customers_stage s WHERE customers.id = s.id AND s.op = 'D';
TRUNCATE public.counters;
VACUUM public.sales;
ANALYZE public.sales;
GRANT SELECT ON public.sales TO reporting;
UNLOAD ('SELECT id, email FROM public.customers') TO 's3://docs-out/customers_' IAM_ROLE default PARQUET;
ALTER TABLE public.category APPEND FROM public.category_stage;
CREATE TABLE public.sales_summary AS
SELECT customer_id, count(*) AS n, sum(price * qty) AS revenue FROM public.sales GROUP BY customer_id;
INSERT INTO public.counters (id, total) SELECT id, (SELECT count(*) FROM public.sales s WHERE s.customer_id = c.id)
FROM public.customers c;
