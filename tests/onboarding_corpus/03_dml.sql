-- Changes in place: MERGE, UPDATE and DELETE with joins, and the DELETE-then-INSERT upsert.
MERGE INTO silver.customers AS t
USING staging.customer_updates u ON t.customer_id = u.customer_id
WHEN MATCHED THEN UPDATE SET email = u.email, country = u.country
WHEN NOT MATCHED THEN INSERT (customer_id, email, country) VALUES (u.customer_id, u.email, u.country);

MERGE INTO analytics.customer_dim AS d
USING (SELECT customer_id, email, country, op FROM staging.customer_updates WHERE updated_at > '2026-01-01') AS u
ON d.customer_id = u.customer_id
WHEN MATCHED AND u.op = 'D' THEN DELETE
WHEN MATCHED THEN UPDATE SET email = u.email, country = u.country
WHEN NOT MATCHED THEN INSERT (customer_id, email, country, lifetime_value) VALUES (u.customer_id, u.email, u.country, 0);

UPDATE analytics.customer_dim SET lifetime_value = l.lifetime_value
FROM analytics.customer_ltv l
WHERE customer_dim.customer_id = l.customer_id;

UPDATE silver.orders SET status = 'vip_' || c.country
FROM silver.customers c
WHERE orders.customer_id = c.customer_id AND c.country IN ('US', 'DE');

DELETE FROM silver.events USING silver.customers c WHERE events.user_id = c.customer_id AND c.country = 'XX';

DELETE FROM silver.orders WHERE customer_id IN (SELECT customer_id FROM staging.customer_updates WHERE op = 'D');

DELETE FROM analytics.customer_contacts USING staging.customer_updates u
WHERE customer_contacts.customer_id = u.customer_id;
INSERT INTO analytics.customer_contacts SELECT customer_id, email, updated_at FROM staging.customer_updates;
