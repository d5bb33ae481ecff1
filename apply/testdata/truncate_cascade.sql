TRUNCATE "public"."simple", "My Schema"."Composite" CASCADE
