"""Sentence (pair) classification and regression: readers, GLUE-style task
processors, features and records, readers written for the original release."""
