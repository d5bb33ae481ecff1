TRUNCATE "public"."simple"
