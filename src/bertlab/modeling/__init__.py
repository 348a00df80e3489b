"""The BERT model in one file, its task heads and its export formats."""
