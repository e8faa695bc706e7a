"""Text: WordPiece tokenization (Python, as the original release, and in-graph), the
WordPiece vocabulary builder, character classes, sentence splitting."""
