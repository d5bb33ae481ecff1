DELETE FROM ONLY "public"."simple" AS t USING unnest($1::text[]) AS u(k1) WHERE t."id" = u.k1::integer
