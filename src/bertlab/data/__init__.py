"""Data sources, pretraining instances, masking and task encodings."""
