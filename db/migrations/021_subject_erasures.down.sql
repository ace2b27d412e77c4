DROP TABLE subject_erasures;
