-- Raw files from S3 into raw tables, in each format COPY reads.
COPY raw.orders FROM 's3://shop-raw/orders/'
IAM_ROLE 'arn:aws:iam::123456789012:role/loader' FORMAT AS CSV IGNOREHEADER 1;

COPY raw.customers FROM 's3://shop-raw/customers/' IAM_ROLE default FORMAT AS PARQUET;

COPY raw.events (event_id, user_id, event_type, event_ts, value)
FROM 's3://shop-raw/events/' IAM_ROLE default JSON 'auto' TIMEFORMAT 'auto';

/* Pipe-delimited text, Redshift's default format; a semicolon in a comment ; ends nothing. */
COPY raw.products FROM 's3://shop-raw/products/'
CREDENTIALS 'aws_iam_role=arn:aws:iam::123456789012:role/loader' DELIMITER '|' REGION 'eu-west-1';

COPY raw.order_items FROM 's3://shop-raw/order_items/' IAM_ROLE default
CSV DELIMITER ';' IGNOREHEADER 1 NULL AS '\N' MAXERROR 50;
