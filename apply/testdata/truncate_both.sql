TRUNCATE "public"."simple", "My Schema"."Composite", "public"."docs" RESTART IDENTITY CASCADE
