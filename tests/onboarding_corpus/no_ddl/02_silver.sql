-- Cleaning into silver over raw tables known only by the COPY column lists, and over tables declared nowhere.
CREATE TABLE silver.user_events AS
SELECT event_id, user_id, LOWER(event_type) AS event_type, event_ts::TIMESTAMP AS event_ts, page, session_id
FROM raw.user_events
WHERE user_id IS NOT NULL;

CREATE TABLE silver.sales AS
SELECT salesid, listid, sellerid, buyerid, eventid, qtysold, pricepaid, commission,
       CONVERT_TIMEZONE('UTC', 'America/New_York', saletime) AS saletime_local
FROM raw.sales
WHERE qtysold > 0;

CREATE TABLE silver.users AS
SELECT userid, username, INITCAP(firstname) || ' ' || INITCAP(lastname) AS full_name, city, state,
       LOWER(TRIM(email)) AS email, likesports
FROM raw.users;

CREATE TABLE silver.events AS
SELECT e.eventid, e.eventname, e.starttime::DATE AS event_date, v.venuename, v.venuecity, c.catname
FROM raw.event e
JOIN raw.venue v ON e.venueid = v.venueid
LEFT JOIN ref.category c ON e.catid = c.catid;

CREATE TABLE silver.customers_latest AS
SELECT customer_id, email, country, updated_at
FROM (
    SELECT customer_id, email, country, updated_at,
           ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY updated_at DESC) AS rn
    FROM staging.customer_changes
) ranked
WHERE rn = 1;

CREATE TABLE silver.session_starts AS
SELECT session_id, user_id, event_ts AS first_event_ts, page AS landing_page
FROM raw.user_events
QUALIFY ROW_NUMBER() OVER (PARTITION BY session_id ORDER BY event_ts) = 1;

INSERT INTO silver.orders
SELECT order_id, customer_id, order_ts::TIMESTAMP AS order_ts, amount::DECIMAL(12, 2) AS amount, LOWER(status) AS status
FROM staging.orders
WHERE order_id IS NOT NULL;

INSERT INTO silver.orders (order_id, customer_id, order_ts, amount, status)
SELECT legacy_id, cust_no, created, total, 'migrated'
FROM legacy.order_archive;

CREATE TABLE silver.contacts AS
SELECT customer_id AS contact_id, email, 'customer' AS contact_type FROM silver.customers_latest
UNION ALL
SELECT supplier_id, contact_email, 'supplier' FROM staging.suppliers
UNION ALL
SELECT userid, email, 'user' FROM silver.users;

CREATE TABLE silver.order_lines AS
SELECT o.order_id, order_ts, product_id, quantity * unit_price AS line_total
FROM silver.orders o
JOIN staging.order_items i ON i.order_id = o.order_id;

CREATE TABLE silver.listing_prices AS
SELECT l.listid, l.eventid, l.priceperticket,
       AVG(l.priceperticket) OVER (PARTITION BY l.eventid) AS event_avg_price,
       l.priceperticket - LAG(l.priceperticket) OVER (PARTITION BY l.sellerid ORDER BY l.listtime) AS price_change
FROM raw.listing l;

SELECT DISTINCT ip, path INTO silver.weblog_paths FROM spectrum.weblog WHERE status = 200;

CREATE TABLE silver.clicks_known_users AS
SELECT k.click_id, k.url, k.clicked_at
FROM spectrum.clicks k
WHERE EXISTS (SELECT 1 FROM silver.users u WHERE u.userid = k.user_id);

CREATE TABLE silver.payments_flagged AS
SELECT payment_id, order_id, amount, amount > 1000 AS is_large
FROM staging.payments
WHERE order_id IN (SELECT order_id FROM silver.orders WHERE status <> 'cancelled');
