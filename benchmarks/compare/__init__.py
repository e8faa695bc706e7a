"""Against the peers: Hugging Face transformers, keras-hub, the original release."""
