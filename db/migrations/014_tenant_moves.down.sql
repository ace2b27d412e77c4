DROP TABLE log_watermark;
DROP TABLE tenant_moves;
DROP TRIGGER idempotency_keys_refuse_frozen ON idempotency_keys;
DROP TRIGGER events_refuse_frozen ON events;
DROP FUNCTION refuse_frozen_writes();
DROP TABLE tenant_write_freezes;
