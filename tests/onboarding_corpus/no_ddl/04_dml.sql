-- Changes in place and moves: MERGE, UPDATE and DELETE with joins, ALTER TABLE … APPEND, UNLOAD, procedures.
MERGE INTO silver.customers_latest AS t
USING staging.customer_changes s ON t.customer_id = s.customer_id
WHEN MATCHED THEN UPDATE SET email = s.email, country = s.country, updated_at = s.updated_at
WHEN NOT MATCHED THEN INSERT (customer_id, email, country, updated_at)
VALUES (s.customer_id, s.email, s.country, s.updated_at);

UPDATE silver.sales SET commission = s.pricepaid * r.rate
FROM silver.sales s JOIN staging.commission_rates r ON s.sellerid = r.sellerid
WHERE sales.salesid = s.salesid;

UPDATE silver.orders SET status = 'refunded' FROM staging.refunds r WHERE orders.order_id = r.order_id;

DELETE FROM silver.user_events USING staging.gdpr_erasures g WHERE user_events.user_id = g.user_id;

DELETE FROM silver.orders WHERE customer_id IN (SELECT customer_id FROM staging.closed_accounts);

ALTER TABLE silver.sales APPEND FROM staging.sales_increment IGNOREEXTRA;

ALTER TABLE silver.orders APPEND FROM staging.orders_late FILLTARGET;

UNLOAD ('SELECT venuename, venuecity FROM silver.events WHERE event_date >= ''2008-01-01''')
TO 's3://exports/events_' IAM_ROLE default FORMAT AS PARQUET;

UNLOAD ('SELECT order_date, revenue FROM gold.daily_orders') TO 's3://exports/daily_orders_' IAM_ROLE default CSV
GZIP ALLOWOVERWRITE;

CALL etl.refresh_materialized_views();

CREATE OR REPLACE PROCEDURE etl.purge_old_events(days INT) AS $$
BEGIN
    DELETE FROM silver.user_events WHERE event_ts < DATEADD(day, -days, GETDATE());
END;
$$ LANGUAGE plpgsql;

CALL etl.purge_old_events(90);

GRANT SELECT ON ALL TABLES IN SCHEMA gold TO GROUP analysts;

VACUUM DELETE ONLY silver.user_events;

ANALYZE silver.orders;

TRUNCATE staging.customer_changes;

CREATE TABLE gold.sales_by_state AS
SELECT u.state, SUM(s.pricepaid) AS revenue, COUNT(*) AS sales
FROM silver.sales s
JOIN silver.users u ON u.userid = s.buyerid
GROUP BY u.state;

CREATE TABLE gold.region_managers AS
SELECT r.region, manager_name, quota
FROM staging.regions r
JOIN staging.managers m ON r.manager_id = m.manager_id;

INSERT INTO silver.sports_fans (userid, email)
SELECT userid, email FROM silver.users WHERE likesports;

CREATE TABLE gold.sales_archive (LIKE silver.sales);

INSERT INTO gold.sales_archive SELECT * FROM silver.sales WHERE saletime_local < '2008-06-01';
