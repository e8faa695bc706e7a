"""Studies of quality: the paper's tables, data sets made for the guides, baselines."""
