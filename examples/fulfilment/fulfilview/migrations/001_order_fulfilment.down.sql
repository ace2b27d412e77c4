DROP TABLE order_fulfilment;
