INSERT INTO "public"."orders" ("id", "qty", "price") SELECT u.v1::integer, u.v2::integer, u.v3::numeric FROM unnest($1::text[], $2::text[], $3::text[]) AS u(v1, v2, v3)
