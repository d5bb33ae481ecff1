SELECT count(*) FROM ONLY "public"."simple" AS t, unnest($1::text[]) AS u(k1) WHERE t."value" = u.k1::double precision
