"""NER: CoNLL reading and writing, tag schemes (IOB1/IOB2/IOBES), features and records."""
