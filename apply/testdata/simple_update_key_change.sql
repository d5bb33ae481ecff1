UPDATE ONLY "public"."simple" AS t SET "id" = u.v1::integer, "value" = u.v2::double precision FROM unnest($1::text[], $2::text[], $3::text[]) AS u(k1, v1, v2) WHERE t."id" = u.k1::integer
