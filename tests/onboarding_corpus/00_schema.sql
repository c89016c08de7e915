-- The warehouse the corpus runs against: raw tables loaded from S3, cleaned silver tables, one dimension.
CREATE TABLE raw.orders (order_id VARCHAR(20), customer_id VARCHAR(20), order_ts VARCHAR(40), amount VARCHAR(20),
                         status VARCHAR(20));
CREATE TABLE raw.customers (customer_id VARCHAR(20), name VARCHAR(100), email VARCHAR(200), country CHAR(2),
                            signup_date DATE);
CREATE TABLE raw.events (event_id VARCHAR(40), user_id VARCHAR(20), event_type VARCHAR(20), event_ts TIMESTAMP,
                         value DOUBLE PRECISION);
CREATE TABLE raw.products (product_id VARCHAR(20), category VARCHAR(50), price DECIMAL(12,2));
CREATE TABLE raw.order_items (order_id VARCHAR(20), product_id VARCHAR(20), quantity INTEGER, unit_price DECIMAL(12,2));
CREATE TABLE staging.customer_updates (customer_id VARCHAR(20), email VARCHAR(200), country CHAR(2), op CHAR(1),
                                       updated_at TIMESTAMP);
CREATE TABLE silver.orders (order_id VARCHAR(20), customer_id VARCHAR(20), order_ts TIMESTAMP, amount DECIMAL(12,2),
                            status VARCHAR(20));
CREATE TABLE silver.customers (customer_id VARCHAR(20), name VARCHAR(100), email VARCHAR(200), country CHAR(2),
                               signup_date DATE);
CREATE TABLE silver.events (event_id VARCHAR(40), user_id VARCHAR(20), event_type VARCHAR(20), event_ts TIMESTAMP,
                            value DOUBLE PRECISION);
CREATE TABLE silver.order_items (order_id VARCHAR(20), product_id VARCHAR(20), quantity INTEGER,
                                 unit_price DECIMAL(12,2));
CREATE TABLE analytics.customer_dim (customer_id VARCHAR(20), email VARCHAR(200), country CHAR(2),
                                     lifetime_value DECIMAL(18,2));
