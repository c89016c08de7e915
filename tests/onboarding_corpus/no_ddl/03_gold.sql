-- Aggregates into gold: DATE(), COUNT(DISTINCT), ::DATE, scalar subqueries, CTEs, derived tables, SELECT *.
CREATE TABLE gold.daily_active_users AS
SELECT DATE(event_ts) AS activity_date, COUNT(DISTINCT user_id) AS active_users, COUNT(*) AS events
FROM silver.user_events
GROUP BY DATE(event_ts);

CREATE TABLE gold.daily_orders AS
SELECT order_ts::DATE AS order_date, COUNT(DISTINCT customer_id) AS customers, SUM(amount) AS revenue
FROM silver.orders
WHERE status <> 'cancelled'
GROUP BY 1;

CREATE TABLE gold.customer_summary AS
SELECT c.customer_id,
       c.country,
       (SELECT COUNT(*) FROM silver.orders o WHERE o.customer_id = c.customer_id) AS order_count,
       (SELECT MAX(o2.order_ts) FROM silver.orders o2 WHERE o2.customer_id = c.customer_id) AS last_order_ts
FROM silver.customers_latest c;

INSERT INTO gold.revenue_by_country
SELECT c.country, DATE_TRUNC('month', o.order_ts) AS month, SUM(o.amount) AS revenue,
       COUNT(DISTINCT o.customer_id) AS buyers
FROM silver.orders o
JOIN silver.customers_latest c ON o.customer_id = c.customer_id
WHERE o.status = 'complete'
GROUP BY 1, 2;

CREATE TABLE gold.event_sales AS
WITH ticket_sales AS (
    SELECT eventid, SUM(qtysold) AS tickets, SUM(pricepaid) AS gross, SUM(commission) AS fees
    FROM silver.sales
    GROUP BY eventid
)
SELECT e.eventname, e.event_date, e.venuename, t.tickets, t.gross - t.fees AS net_revenue
FROM silver.events e
JOIN ticket_sales t ON t.eventid = e.eventid;

CREATE TABLE gold.top_buyers AS
SELECT buyerid, total_paid, RANK() OVER (ORDER BY total_paid DESC) AS buyer_rank
FROM (SELECT buyerid, SUM(pricepaid) AS total_paid FROM silver.sales GROUP BY buyerid) AS totals
WHERE total_paid > 10000;

CREATE VIEW gold.v_user_activity AS
SELECT u.userid, u.full_name, COUNT(ue.event_id) AS events, MAX(ue.event_ts) AS last_seen
FROM silver.users u
LEFT JOIN silver.user_events ue ON ue.user_id = u.userid
GROUP BY u.userid, u.full_name;

CREATE TABLE gold.monthly_sellers AS
SELECT DATE_TRUNC('month', saletime_local)::DATE AS sale_month, sellerid,
       SUM(pricepaid) AS sales_amount, COUNT(DISTINCT buyerid) AS distinct_buyers
FROM silver.sales
GROUP BY 1, 2
HAVING SUM(qtysold) >= 4;

CREATE TABLE gold.order_lines_snapshot AS SELECT * FROM silver.order_lines;

CREATE TABLE gold.venue_usage AS
SELECT venuecity,
       COUNT(*) AS events,
       (SELECT COUNT(*) FROM silver.events e2 WHERE e2.venuecity = e.venuecity AND e2.catname = 'Pop') AS pop_events
FROM silver.events e
GROUP BY venuecity;

INSERT INTO gold.user_country (userid, country_name)
SELECT u.userid, cc.country_name
FROM silver.users u
JOIN ref.country_codes cc ON cc.code = u.state;

CREATE TABLE gold.weekly_clicks AS
SELECT DATE_TRUNC('week', clicked_at) AS week, COUNT(click_id) AS clicks, COUNT(DISTINCT user_id) AS users
FROM spectrum.clicks
GROUP BY 1;

CREATE TABLE gold.contact_kinds AS
SELECT contact_type, COUNT(*) AS contacts FROM silver.contacts GROUP BY contact_type;

CREATE TABLE gold.order_payment AS
SELECT o.order_id, o.amount AS order_amount, paid_at
FROM silver.orders o
JOIN staging.payments p ON p.order_id = o.order_id;
