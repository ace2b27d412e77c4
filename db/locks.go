package db

// Advisory-lock classes (the first key of pg_advisory_lock's two-key form)
// that more than one package must agree on. Each package that owns a lock
// keeps its class beside the lock; a class is here when another package
// has to find the lock in pg_locks.

// ImportLockClass ("STIM") is held, as a session advisory lock keyed by
// hashtext(tenant), by an archive import for as long as it writes the
// tenant's data: the tenant erasure's quiescence waits until no session
// holds it for the tenant it erases (ARCHITECTURE decisions 13 and 18).
const ImportLockClass int32 = 0x5354494D
