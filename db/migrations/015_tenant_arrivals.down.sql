DROP TABLE tenant_arrivals;
