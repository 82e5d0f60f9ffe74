"""Bridges to other libraries (optional extras): TransformerLens."""
