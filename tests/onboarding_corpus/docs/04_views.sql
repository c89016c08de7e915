-- Views with column lists, their queries in parentheses or not.
CREATE VIEW public.customer_emails (customer, address) AS SELECT name, email FROM public.customers;
CREATE VIEW public.eu_customers (id, name) AS (SELECT id, name FROM public.customers WHERE region = 'eu');
CREATE OR REPLACE VIEW public.sales_by_customer (customer_id, quantity) AS
(SELECT customer_id, sum(qty) FROM public.sales GROUP BY customer_id);
CREATE VIEW public.big_venues AS (SELECT venuename, venueseats FROM public.venue WHERE venueseats > 10000);
CREATE VIEW public.late_binding (id) AS SELECT id FROM public.customers WITH NO SCHEMA BINDING;
CREATE VIEW public.nested (n) AS ((SELECT name FROM public.customers));
