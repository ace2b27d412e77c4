DROP TABLE projection_ledger_since;
DROP TABLE projection_ledger_marks;
DROP TABLE projection_ledger;
