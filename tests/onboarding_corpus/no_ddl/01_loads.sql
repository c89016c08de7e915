-- Raw loads as warehouse repositories keep them: COPY with column lists and compressed files, no CREATE TABLE.
COPY raw.users (userid, username, firstname, lastname, city, state, email, likesports)
FROM 's3://tickit-raw/allusers_pipe/' IAM_ROLE default DELIMITER '|' GZIP REGION 'us-west-2';

COPY raw.venue (venueid, venuename, venuecity, venuestate, venueseats)
FROM 's3://tickit-raw/venue/' IAM_ROLE default CSV IGNOREHEADER 1 BZIP2;

COPY raw.sales (salesid, listid, sellerid, buyerid, eventid, dateid, qtysold, pricepaid, commission, saletime)
FROM 's3://tickit-raw/sales/' IAM_ROLE default DELIMITER '\t' ZSTD;

COPY raw.event (eventid, venueid, catid, dateid, eventname, starttime)
FROM 's3://tickit-raw/event/' IAM_ROLE default FORMAT AS PARQUET;

COPY raw.user_events (event_id, user_id, event_type, event_ts, page, session_id)
FROM 's3://app-raw/events/' IAM_ROLE default FORMAT AS JSON 'auto' GZIP TIMEFORMAT 'auto';

COPY raw.listing (listid, sellerid, eventid, dateid, numtickets, priceperticket, totalprice, listtime)
FROM 's3://tickit-raw/listings/' IAM_ROLE default CSV GZIP;

COPY raw.date FROM 's3://tickit-raw/date/' IAM_ROLE default FORMAT AS PARQUET;

COPY raw.orc_archive FROM 's3://tickit-raw/archive/' IAM_ROLE default FORMAT AS ORC;

COPY raw.payments (payment_id, order_id, amount, paid_at)
FROM 's3://shop-raw/payments/manifest.json' IAM_ROLE default CSV MANIFEST;

CREATE EXTERNAL TABLE spectrum.clicks (click_id BIGINT, user_id INTEGER, url VARCHAR(500), clicked_at TIMESTAMP)
STORED AS PARQUET
LOCATION 's3://app-raw/clicks/';

CREATE EXTERNAL TABLE spectrum.weblog (ip VARCHAR(40), requested_at TIMESTAMP, path VARCHAR(500), status INTEGER)
ROW FORMAT DELIMITED FIELDS TERMINATED BY '\t'
STORED AS TEXTFILE
LOCATION 's3://app-raw/weblog/';

INSERT INTO ref.category (catid, catgroup, catname, catdesc)
VALUES (1, 'Sports', 'MLB', 'Major League Baseball'), (9, 'Concerts', 'Pop', 'All rock and pop music concerts');

INSERT INTO ref.country_codes (code, country_name) VALUES ('DE', 'Germany'), ('FR', 'France'), ('US', 'United States');
