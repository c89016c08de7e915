-- Cleaning into silver, aggregates into analytics: CTAS, INSERT, views, CTEs, subqueries, unions, windows.
INSERT INTO silver.orders
SELECT order_id, customer_id, CAST(order_ts AS TIMESTAMP), CAST(amount AS DECIMAL(12,2)), LOWER(status)
FROM raw.orders
WHERE order_id IS NOT NULL;

INSERT INTO silver.customers (customer_id, name, email, country, signup_date)
SELECT DISTINCT customer_id, TRIM(name), LOWER(email), UPPER(country), signup_date FROM raw.customers;

INSERT INTO silver.events SELECT * FROM raw.events WHERE event_type IN ('view', 'click', 'purchase');

INSERT INTO silver.order_items
SELECT i.order_id, i.product_id, i.quantity, COALESCE(i.unit_price, p.price)
FROM raw.order_items i
LEFT JOIN raw.products p ON i.product_id = p.product_id;

CREATE TABLE silver.products AS SELECT product_id, category, price FROM raw.products WHERE price > 0;

CREATE TABLE analytics.daily_revenue AS
SELECT CAST(o.order_ts AS DATE) AS order_date, c.country, SUM(o.amount) AS revenue, COUNT(*) AS orders
FROM silver.orders o
JOIN silver.customers c ON o.customer_id = c.customer_id
WHERE o.status = 'complete'
GROUP BY 1, 2;

CREATE TABLE analytics.customer_ltv AS
WITH totals AS (
    SELECT customer_id, SUM(amount) AS total, COUNT(*) AS n FROM silver.orders GROUP BY customer_id
)
SELECT c.customer_id, c.email, t.total AS lifetime_value, t.n AS order_count
FROM silver.customers c
JOIN totals t ON c.customer_id = t.customer_id;

INSERT INTO analytics.big_spenders
SELECT s.customer_id, s.spend
FROM (SELECT customer_id, SUM(amount) AS spend FROM silver.orders GROUP BY customer_id) s
WHERE s.spend > 1000;

CREATE VIEW analytics.all_activity AS
SELECT user_id AS actor_id, event_ts AS happened_at, 'event' AS source FROM silver.events
UNION ALL
SELECT customer_id, order_ts, 'order' FROM silver.orders;

CREATE TABLE analytics.order_rank AS
SELECT order_id, customer_id, amount,
       ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY order_ts) AS order_seq,
       SUM(amount) OVER (PARTITION BY customer_id) AS customer_total
FROM silver.orders;

CREATE TABLE analytics.customer_last_order AS
SELECT c.customer_id,
       (SELECT MAX(o.order_ts) FROM silver.orders o WHERE o.customer_id = c.customer_id) AS last_order_ts
FROM silver.customers c;

INSERT INTO analytics.active_customers
SELECT customer_id, email FROM silver.customers
WHERE customer_id IN (SELECT customer_id FROM silver.orders WHERE order_ts >= '2026-01-01');

INSERT INTO analytics.buyers
SELECT c.customer_id, c.country FROM silver.customers c
WHERE EXISTS (SELECT 1 FROM silver.orders o WHERE o.customer_id = c.customer_id AND o.amount > 100);

CREATE TABLE analytics.country_segments AS
SELECT country, COUNT(DISTINCT customer_id) AS customers,
       CASE WHEN COUNT(*) > 100 THEN 'large' ELSE 'small' END AS segment
FROM silver.customers
GROUP BY country
HAVING COUNT(*) > 10;

CREATE TABLE silver.orders_enriched AS
SELECT o.*, c.country FROM silver.orders o JOIN silver.customers c ON o.customer_id = c.customer_id;

SELECT product_id, SUM(quantity) AS units INTO analytics.product_units FROM silver.order_items GROUP BY product_id;

INSERT INTO silver.latest_events
WITH ranked AS (
    SELECT event_id, user_id, event_type, event_ts,
           ROW_NUMBER() OVER (PARTITION BY event_id ORDER BY event_ts DESC) AS rn
    FROM raw.events
)
SELECT event_id, user_id, event_type, event_ts FROM ranked WHERE rn = 1;

CREATE TABLE analytics.order_margin AS
SELECT i.order_id, SUM(i.quantity * (i.unit_price - p.price)) AS margin
FROM silver.order_items i
JOIN silver.products p ON p.product_id = i.product_id
GROUP BY i.order_id;

CREATE VIEW analytics.customer_orders_v AS
SELECT c.customer_id, NVL(SUM(o.amount), 0) AS total
FROM silver.customers c
LEFT JOIN silver.orders o ON o.customer_id = c.customer_id
GROUP BY c.customer_id;

INSERT INTO analytics.monthly_events
SELECT DATE_TRUNC('month', event_ts) AS month, event_type, COUNT(*) AS events, SUM(value) AS total_value
FROM silver.events
GROUP BY 1, 2;

UNLOAD ('SELECT country, SUM(revenue) AS revenue FROM analytics.daily_revenue WHERE order_date >= ''2026-01-01'' GROUP BY country')
TO 's3://shop-exports/revenue_by_country/' IAM_ROLE default FORMAT AS PARQUET;

UNLOAD ('SELECT * FROM analytics.customer_ltv') TO 's3://shop-exports/ltv/' IAM_ROLE default CSV;
