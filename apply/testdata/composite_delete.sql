DELETE FROM ONLY "My Schema"."Composite" AS t USING unnest($1::text[], $2::text[]) AS u(k1, k2) WHERE t."tenant" = u.k1::bigint AND t."Odd ""name""" = u.k2::text
