-- Session and maintenance statements are skipped; the transformations between them are not.
BEGIN;
SET search_path TO analytics, public;
TRUNCATE analytics.daily_buyers;
INSERT INTO analytics.daily_buyers
SELECT CAST(event_ts AS DATE), COUNT(DISTINCT user_id) FROM silver.events WHERE event_type = 'purchase' GROUP BY 1;
COMMIT;
GRANT SELECT ON analytics.daily_revenue TO GROUP analysts;
VACUUM analytics.daily_revenue;
ANALYZE analytics.daily_revenue;

CREATE TABLE analytics.user_sessions AS
SELECT user_id, event_ts,
       LAG(event_ts) OVER (PARTITION BY user_id ORDER BY event_ts) AS prev_ts,
       DATEDIFF(minute, LAG(event_ts) OVER (PARTITION BY user_id ORDER BY event_ts), event_ts) AS gap_minutes
FROM silver.events;

CREATE TABLE analytics.first_orders AS
SELECT customer_id, order_id, order_ts FROM silver.orders
QUALIFY ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY order_ts) = 1;

INSERT INTO analytics.order_countries
SELECT o.order_id, c.country FROM silver.orders o, silver.customers c
WHERE o.customer_id = c.customer_id AND o.amount > 0;

CREATE TABLE analytics.item_orders AS
SELECT order_id, i.product_id, o.customer_id
FROM silver.order_items i
JOIN silver.orders o USING (order_id);
