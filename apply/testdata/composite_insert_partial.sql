INSERT INTO "My Schema"."Composite" ("tenant", "Odd ""name""") SELECT u.v1::bigint, u.v2::text FROM unnest($1::text[], $2::text[]) AS u(v1, v2)
