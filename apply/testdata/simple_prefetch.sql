SELECT count(t.ctid) FROM ONLY "public"."simple" AS t, unnest($1::text[]) AS u(k1) WHERE t."id" = u.k1::integer
