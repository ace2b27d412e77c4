DROP TABLE subject_keys;
DROP TABLE key_encryption_keys;
