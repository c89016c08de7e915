-- COPY in every format of the Redshift documentation: those the bronze ingest reads become sources.
COPY public.category FROM 's3://docs-raw/category_pipe/' IAM_ROLE default DELIMITER '|';
COPY public.category FROM 's3://docs-raw/category_csv/' IAM_ROLE default CSV IGNOREHEADER 1;
COPY public.category FROM 's3://docs-raw/category_json/' IAM_ROLE default FORMAT AS JSON 'auto';
COPY public.category FROM 's3://docs-raw/category_paths/' IAM_ROLE default JSON 's3://docs-raw/jsonpaths.json';
COPY public.venue FROM 's3://docs-raw/venue_parquet/' IAM_ROLE default FORMAT AS PARQUET;
COPY public.venue FROM 's3://docs-raw/venue_avro/' IAM_ROLE default FORMAT AS AVRO 'auto';
COPY public.venue FROM 's3://docs-raw/venue_orc/' IAM_ROLE default FORMAT AS ORC;
COPY public.venue FROM 's3://docs-raw/venue_fw/' IAM_ROLE default FIXEDWIDTH 'venueid:3,venuename:25,venuecity:12,venueseats:6';
COPY public.sales FROM 's3://docs-raw/sales_gz/' IAM_ROLE default DELIMITER '\t' GZIP;
COPY public.sales FROM 's3://docs-raw/sales_bz2/' IAM_ROLE default CSV BZIP2;
COPY public.sales FROM 's3://docs-raw/sales_zst/' IAM_ROLE default CSV ZSTD;
COPY public.sales FROM 's3://docs-raw/sales_lzo/' IAM_ROLE default CSV LZOP;
COPY public.sales FROM 's3://docs-raw/sales.manifest' IAM_ROLE default CSV MANIFEST;
COPY public.venue (venueid, venuename, venuecity, venueseats) FROM 's3://docs-raw/venue_csv/' IAM_ROLE default CSV;
COPY public.events_raw FROM 's3://docs-raw/events_parquet/' IAM_ROLE default FORMAT AS PARQUET;
COPY public.category FROM 'dynamodb://ProductCatalog' IAM_ROLE default READRATIO 50;
