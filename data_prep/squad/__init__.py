"""SQuAD: reader, features (windows over long contexts), records and the answer
post-processing."""
