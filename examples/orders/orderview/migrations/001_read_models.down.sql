DROP TABLE daily_revenue;
DROP TABLE customer_orders;
DROP TABLE customer_paid_totals;
DROP TABLE customer_summaries;
DROP TABLE order_list;
DROP TABLE order_detail_lines;
DROP TABLE order_details;
