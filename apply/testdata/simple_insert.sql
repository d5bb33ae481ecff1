INSERT INTO "public"."simple" ("id", "value") SELECT u.v1::integer, u.v2::double precision FROM unnest($1::text[], $2::text[]) AS u(v1, v2)
