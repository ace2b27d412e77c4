DROP TABLE loyalty_balances;
