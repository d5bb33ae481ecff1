INSERT INTO "My Schema"."Composite" ("tenant", "Odd ""name""", "note") SELECT u.v1::bigint, u.v2::text, u.v3::character varying FROM unnest($1::text[], $2::text[], $3::text[]) AS u(v1, v2, v3)
