DROP TABLE relay_dead_letters;
DROP TABLE relay_applied;
DROP TABLE "watermill_offsets_strata_events";
DROP TABLE "watermill_strata_events";
