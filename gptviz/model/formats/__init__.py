"""Checkpoint formats people bring, one small module each: detection and the mapping onto a GPTConfig and our
names. load.py picks the format from the file; base.py reads pickles safely. No imports here, so that
checkpoint.py can import base.py and openai_gpt.py without importing the loaders that build on it."""
