-- SELECT INTO, over set operations too.
SELECT * INTO public.all_categories FROM public.category UNION ALL SELECT * FROM public.category_stage;
SELECT id, name INTO public.customer_names FROM public.customers;
SELECT id INTO TEMP TABLE recent_ids FROM public.customers_stage WHERE op = 'I';
INSERT INTO public.customer_names SELECT id, 'n/a' FROM recent_ids;
SELECT catid, catname INTO public.cat_names FROM public.category UNION SELECT catid, catname FROM public.category_stage;
SELECT venuename INTO UNLOGGED public.venue_names FROM public.venue WHERE venueseats > 0;
