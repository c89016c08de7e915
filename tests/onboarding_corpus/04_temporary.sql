-- Temporary tables, in each of Redshift's spellings: lineage collapses through them onto permanent tables.
CREATE TEMP TABLE recent_orders AS
SELECT order_id, customer_id, amount FROM silver.orders WHERE order_ts >= '2026-10-01';

SELECT customer_id, SUM(amount) AS recent_total INTO #recent_totals FROM recent_orders GROUP BY customer_id;

CREATE TABLE analytics.recent_customer_value AS
SELECT c.customer_id, c.country, r.recent_total
FROM silver.customers c
JOIN #recent_totals r ON r.customer_id = c.customer_id;

CREATE TABLE #stage_events (event_id VARCHAR(40), user_id VARCHAR(20), day DATE);
INSERT INTO #stage_events
SELECT event_id, user_id, CAST(event_ts AS DATE) FROM silver.events WHERE event_type = 'purchase';
INSERT INTO analytics.daily_buyers
SELECT day, COUNT(DISTINCT user_id) AS buyers FROM #stage_events GROUP BY day;
DROP TABLE #stage_events;

CREATE TEMPORARY TABLE tmp_top AS SELECT product_id, units FROM analytics.product_units ORDER BY units DESC LIMIT 10;
UPDATE tmp_top SET units = units * 2;
CREATE TABLE analytics.top_products AS
SELECT t.product_id, p.category, t.units
FROM tmp_top t
JOIN silver.products p ON p.product_id = t.product_id;
