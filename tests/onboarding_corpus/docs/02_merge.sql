-- MERGE as the Redshift and PostgreSQL documentation write it.
MERGE INTO public.category USING public.category_stage ON category.catid = category_stage.catid
WHEN MATCHED THEN UPDATE SET catname = category_stage.catname, catgroup = category_stage.catgroup
WHEN NOT MATCHED THEN INSERT VALUES (category_stage.catid, category_stage.catgroup, category_stage.catname);
MERGE INTO public.customers USING public.customers_stage AS s ON customers.id = s.id
WHEN MATCHED AND s.op = 'D' THEN DELETE
WHEN MATCHED THEN UPDATE SET email = s.email
WHEN NOT MATCHED THEN INSERT (id, name, email, region) VALUES (s.id, s.name, s.email, s.region);
MERGE INTO public.counters AS c USING (SELECT customer_id AS id, qty FROM public.sales WHERE qty > 0) AS d
ON c.id = d.id
WHEN MATCHED THEN UPDATE SET total = d.qty
WHEN NOT MATCHED THEN INSERT (id, total) VALUES (d.id, d.qty);
MERGE INTO public.counters USING public.sales ON counters.id = sales.customer_id
WHEN NOT MATCHED THEN INSERT VALUES (sales.customer_id, sales.qty);
MERGE INTO public.category USING public.category_stage s ON category.catid = s.catid
WHEN MATCHED THEN DELETE;
MERGE INTO public.customers c USING public.customers_stage s ON c.id = s.id
WHEN NOT MATCHED THEN INSERT (id, name, email, region) VALUES (s.id, s.name, s.email, s.region)
WHEN MATCHED THEN DO NOTHING;
MERGE INTO public.archive USING public.category_stage s ON archive.catid = s.catid
WHEN NOT MATCHED THEN INSERT VALUES (s.catid, s.catname);
