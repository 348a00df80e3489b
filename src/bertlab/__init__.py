"""bertlab: BERT pretraining, fine-tuning and the paper's ablations, end to end."""
