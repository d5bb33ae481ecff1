UPDATE ONLY "public"."orders" AS t SET "qty" = u.v1::integer, "price" = u.v2::numeric FROM unnest($1::text[], $2::text[], $3::text[]) AS u(k1, v1, v2) WHERE t."id" = u.k1::integer
