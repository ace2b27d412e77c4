DROP TABLE process_history;
DROP TABLE process_deadlines;
DROP TABLE process_steps;
DROP TABLE process_instances;
