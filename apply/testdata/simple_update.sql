UPDATE ONLY "public"."simple" AS t SET "value" = u.v1::double precision FROM unnest($1::text[], $2::text[]) AS u(k1, v1) WHERE t."id" = u.k1::integer
