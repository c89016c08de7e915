-- INSERT … VALUES: literal rows, and values that are subqueries.
INSERT INTO public.category VALUES (12, 'Concerts', 'Comedy');
INSERT INTO public.category (catid, catgroup, catname) VALUES (13, 'Concerts', 'Jazz'), (14, 'Concerts', 'Blues');
INSERT INTO public.counters VALUES ((SELECT max(salesid) FROM public.sales), 0);
INSERT INTO public.counters (total, id) VALUES ((SELECT count(*) FROM public.sales), (SELECT max(id) FROM public.customers));
INSERT INTO public.event_totals VALUES ((SELECT count(*) FROM public.sales), 'sales');
INSERT INTO public.customers (id, name, email, region)
VALUES (1, 'a', 'a@example.com', 'eu'), ((SELECT max(id) FROM public.customers_stage), 'b', 'b@example.com', 'us');
INSERT INTO public.venue (venueid, venuename) VALUES (DEFAULT, 'Stadium');
